package main

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testdata/sale.json is a report of go run ./examples/flashsale -format
// json on embedded defaults (2000 buyers), with a row that did not run.

func TestPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sale.png")
	require.NoError(t, run([]string{"-o", path, "testdata/sale.json"}, nil, io.Discard))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "the chart is a PNG")
	assert.Greater(t, img.Bounds().Dx(), 1000)
	assert.Greater(t, img.Bounds().Dy(), 400)
}

// The SVG, read from stdin: its text says which store each row used, that
// the throughput axis is linear and the latency axis a log one on every
// tick, and gives the in-process map's figures instead of drawing them.
func TestSVG(t *testing.T) {
	in, err := os.ReadFile("testdata/sale.json")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "sale.svg")
	require.NoError(t, run([]string{"-o", path}, bytes.NewReader(in), io.Discard))
	text := svgText(t, path)
	for _, want := range []string{"luascript / redis *", "rowlock / sqlite", "embedded miniredis", "p50 latency", "p90 latency",
		"p99 latency", "max latency", "milliseconds, log scale", "Throughput (linear scale)", "requests per second",
		"not a real server", "Not drawn: map / process (a map in this process, no server)", "100 ms", "1 s", "2,704"} {
		assert.Contains(t, text, want, "the SVG chart's text")
	}
	assert.NotContains(t, text, "zklock", "a row that did not run")
	assert.NotContains(t, text, "0.01 ms", "the latency axis fits the rows with a server, not the map's 2.46µs")
}

// svgText is the character data of the SVG at path, which must be
// well-formed XML.
func svgText(t *testing.T, path string) string {
	svg, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return text.String()
		}
		require.NoError(t, err, "the chart is well-formed XML")
		if cd, ok := tok.(xml.CharData); ok {
			text.Write(cd)
			text.WriteByte('\n')
		}
	}
}

func TestLogTicks(t *testing.T) {
	var labels []string
	for _, tick := range (logTicks{unit: "ms"}).Ticks(15, 2500) {
		if tick.Label != "" {
			labels = append(labels, tick.Label)
		}
	}
	assert.Equal(t, []string{"20 ms", "50 ms", "100 ms", "200 ms", "500 ms", "1 s", "2 s"}, labels)

	labels = nil
	for _, tick := range (logTicks{unit: "ms"}).Ticks(1.7, 2500) {
		if tick.Label != "" {
			labels = append(labels, tick.Label)
		}
	}
	assert.Equal(t, []string{"3 ms", "10 ms", "30 ms", "100 ms", "300 ms", "1 s"}, labels, "over 3 decades, fewer labels")
}

func TestBadArgs(t *testing.T) {
	for _, args := range [][]string{{}, {"-o", "x.gif"}, {"-o", "x.png", "a.json", "b.json"}} {
		var stderr bytes.Buffer
		assert.Error(t, run(args, strings.NewReader("[]"), &stderr), "%q", args)
		assert.Contains(t, stderr.String(), "usage: chart", "%q", args)
	}
	err := run([]string{"-o", filepath.Join(t.TempDir(), "x.png")}, strings.NewReader(`[{"strategy":"map","store":"process","ran":true,"requests":5}]`), io.Discard)
	assert.ErrorContains(t, err, "nothing to draw")
}
