// Command chart draws flashsale's JSON report as a PNG or an SVG, with
// gonum/plot: on the left each row's request latency percentiles (p50,
// p90, p99, max) on a log axis in milliseconds, on the right its
// throughput as bars on a linear axis, each bar labelled with its value.
// It is a command of its own so that flashsale, the main job, does not
// build the plotting library.
//
//	go run ./examples/flashsale -format json > sale.json
//	go run ./examples/flashsale/chart -o sale.png sale.json
//	go run ./examples/flashsale -format json | go run ./examples/flashsale/chart -o sale.svg
//
// Each row is labelled with its strategy, its store and where the store
// ran; rows whose server ran in the flashsale process (miniredis) are
// shaded and starred, so that they do not read as a real server's speed.
// The in-process map (store "process") has no server at all: it is left
// out of both axes, which it would stretch by orders of magnitude, and its
// figures are written under the chart. Rows that did not run are left out.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/stockkit/inventory/examples/internal/cli"
)

func main() {
	cli.Main("chart", func(_ context.Context, args []string, _, stderr io.Writer) error {
		return run(args, os.Stdin, stderr)
	})
}

// row is what the chart reads of a row of flashsale's JSON report.
type row struct {
	Strategy   string  `json:"strategy"`
	Store      string  `json:"store"`
	Where      string  `json:"where"`
	Embedded   bool    `json:"embedded"`
	Ran        bool    `json:"ran"`
	Buyers     int     `json:"buyers"`
	Requests   int64   `json:"requests"`
	Initial    int64   `json:"initial"`
	Throughput float64 `json:"throughput_rps"`
	P50MS      float64 `json:"p50_ms"`
	P90MS      float64 `json:"p90_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`
}

// inProcess reports whether r ran with no server at all (the in-process map).
func (r row) inProcess() bool { return r.Store == "process" }

// run is the whole program: it reads the report from the file args name,
// or stdin, and writes the chart -o names.
func run(args []string, stdin io.Reader, stderr io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "the chart to write: a PNG (*.png) or an SVG (*.svg)")
	title := fs.String("title", "", "the chart's title (default: the sale's buyers and units)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: chart -o sale.png|sale.svg [flashsale.json]\n\n"+
			"Draws flashsale's JSON report (-format json), read from the file or standard input.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return cli.ErrUsage
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(*out)), ".")
	if format != "png" && format != "svg" || fs.NArg() > 1 {
		fs.Usage()
		return cli.ErrUsage
	}
	in := stdin
	if fs.NArg() == 1 {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var rows []row
	if err := json.NewDecoder(in).Decode(&rows); err != nil {
		return fmt.Errorf("reading flashsale's JSON report: %w", err)
	}
	return write(*out, format, *title, rows)
}

// percentiles are the latency marks of the chart: their glyphs, and where
// each sits within its row (as a share of the row's height), so that marks
// of close values do not cover each other.
var percentiles = []struct {
	name  string
	value func(row) float64
	shape draw.GlyphDrawer
	color color.Color
	dy    float64
}{
	{"p50", func(r row) float64 { return r.P50MS }, draw.CircleGlyph{}, color.RGBA{0x1f, 0x77, 0xb4, 0xff}, 0.27},
	{"p90", func(r row) float64 { return r.P90MS }, draw.TriangleGlyph{}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, 0.09},
	{"p99", func(r row) float64 { return r.P99MS }, draw.BoxGlyph{}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, -0.09},
	{"max", func(r row) float64 { return r.MaxMS }, draw.CrossGlyph{}, color.RGBA{0xd6, 0x27, 0x28, 0xff}, -0.27},
}

// embeddedShade is the band behind the rows whose server ran in process.
var embeddedShade = color.RGBA{0xee, 0xe4, 0xc8, 0xff}

// write draws rows into path in format ("png" or "svg").
func write(path, format, title string, rows []row) error {
	var drawn, left []row
	for _, r := range rows {
		switch {
		case !r.Ran || r.Requests == 0:
		case r.inProcess():
			left = append(left, r)
		default:
			drawn = append(drawn, r)
		}
	}
	if len(drawn) == 0 {
		return fmt.Errorf("no row with a server ran: nothing to draw")
	}
	if title == "" {
		title = fmt.Sprintf("Flash sale: %d buyers for %d units, each strategy on its own SKU", drawn[0].Buyers, drawn[0].Initial)
	}
	// Row i is drawn at y = n-1-i, so the report's first row is on top.
	n := len(drawn)
	y := func(i int) float64 { return float64(n - 1 - i) }
	labels := make([]string, n)
	var shaded []float64
	for i, r := range drawn {
		name := r.Strategy + " / " + r.Store
		if r.Embedded {
			name += " *"
			shaded = append(shaded, y(i))
		}
		labels[n-1-i] = name + "\n" + shorten(r.Where, 44)
	}

	lat := plot.New()
	lat.Title.Text = "Latency per request, retries included"
	lat.X.Label.Text = "milliseconds, log scale"
	lat.X.Scale = plot.LogScale{}
	lat.NominalY(labels...)
	lat.Y.Min, lat.Y.Max = -0.5, float64(n)-0.5
	lat.Y.Tick.Label.Font.Size = vg.Points(9)
	// An SVG viewer without the layout's font draws its text in a wider
	// one, from where the layout put it: the labels get room to grow.
	lat.Y.Padding = 0.75 * vg.Inch
	lat.Add(&bands{rows: shaded})
	lo, hi := math.Inf(1), 0.0
	for _, r := range drawn {
		for _, p := range percentiles {
			v := max(p.value(r), 1e-3)
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	lat.X.Min, lat.X.Max = lo/1.5, hi*1.5
	lat.X.Tick.Marker = logTicks{unit: "ms"}
	lat.Add(&plotter.Grid{Vertical: plotter.NewGrid().Vertical}, &rowLines{n: n})
	for _, p := range percentiles {
		xys := make(plotter.XYs, n)
		for i, r := range drawn {
			xys[i] = plotter.XY{X: max(p.value(r), 1e-3), Y: y(i) + p.dy}
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		s.GlyphStyle = glyph(p.shape, p.color)
		lat.Add(s)
	}

	thr := plot.New()
	thr.Title.Text = "Throughput (linear scale)"
	thr.X.Label.Text = "requests per second"
	thr.NominalY(make([]string, n)...)
	thr.Y.Min, thr.Y.Max = -0.5, float64(n)-0.5
	thr.Add(&bands{rows: shaded})
	top := 0.0
	for _, r := range drawn {
		top = max(top, r.Throughput)
	}
	thr.X.Min, thr.X.Max = 0, top*1.3 // room for the longest bar's label
	thr.X.Tick.Marker = linearTicks{}
	thr.Add(&plotter.Grid{Vertical: plotter.NewGrid().Vertical}, &rowLines{n: n})
	bar := color.RGBA{0x44, 0x77, 0xaa, 0xff}
	for i, r := range drawn {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y(i)}, {X: r.Throughput, Y: y(i)}})
		if err != nil {
			return err
		}
		l.Color, l.Width = bar, vg.Points(10)
		thr.Add(l)
		v, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: r.Throughput, Y: y(i)}},
			Labels: []string{thousands(r.Throughput)}})
		if err != nil {
			return err
		}
		v.Offset = vg.Point{X: vg.Points(4)}
		for j := range v.TextStyle {
			v.TextStyle[j].Font.Size = vg.Points(9)
			v.TextStyle[j].YAlign = draw.YCenter
		}
		thr.Add(v)
	}

	var notes []string
	if len(shaded) > 0 {
		notes = append(notes, "* shaded: the server ran inside the flashsale process (miniredis); its latency and throughput are not a real server's.")
	}
	for _, r := range left {
		notes = append(notes, fmt.Sprintf("Not drawn: %s / %s (%s, no server): %s req/s, p50 %s, p99 %s, max %s.",
			r.Strategy, r.Store, r.Where, thousands(r.Throughput), msLabel(r.P50MS), msLabel(r.P99MS), msLabel(r.MaxMS)))
	}
	notes = append(notes, "Rows are in the order of the report. Within a row the marks are stacked p50, p90, p99, max from the top.")

	const rowHeight = 0.55 * vg.Inch
	header := vg.Length(0.8 * vg.Inch)
	footer := vg.Length(0.1*vg.Inch) + vg.Length(len(notes))*0.2*vg.Inch
	width := 14 * vg.Inch
	height := header + footer + vg.Length(1.0)*vg.Inch + vg.Length(n)*rowHeight
	cw, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	text := lat.Title.TextStyle
	text.Font.Size = vg.Points(14)
	text.XAlign, text.YAlign = draw.XLeft, draw.YTop
	dc.FillText(text, vg.Point{X: 0.2 * vg.Inch, Y: height - 0.12*vg.Inch}, title)
	// The legend, on one line under the title.
	key := lat.Title.TextStyle
	key.Font.Size = vg.Points(10)
	key.XAlign, key.YAlign = draw.XLeft, draw.YCenter
	at := vg.Point{X: 0.3 * vg.Inch, Y: height - 0.55*vg.Inch}
	for _, p := range percentiles {
		dc.DrawGlyph(glyph(p.shape, p.color), at)
		at.X += 0.12 * vg.Inch
		dc.FillText(key, at, p.name+" latency")
		at.X += 1.0 * vg.Inch
	}
	if len(shaded) > 0 {
		dc.FillPolygon(embeddedShade, []vg.Point{{X: at.X - 0.08*vg.Inch, Y: at.Y - 0.08*vg.Inch}, {X: at.X + 0.08*vg.Inch, Y: at.Y - 0.08*vg.Inch},
			{X: at.X + 0.08*vg.Inch, Y: at.Y + 0.08*vg.Inch}, {X: at.X - 0.08*vg.Inch, Y: at.Y + 0.08*vg.Inch}})
		at.X += 0.14 * vg.Inch
		dc.FillText(key, at, "* embedded server: ran inside the flashsale process")
	}
	note := lat.Title.TextStyle
	note.Font.Size = vg.Points(9)
	note.XAlign, note.YAlign = draw.XLeft, draw.YBottom
	for i, s := range notes {
		dc.FillText(note, vg.Point{X: 0.2 * vg.Inch, Y: 0.1*vg.Inch + vg.Length(len(notes)-1-i)*0.2*vg.Inch}, s)
	}
	body := draw.Crop(dc, 0, 0, footer, -header)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.3 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.3 * vg.Inch}
	canvases := plot.Align([][]*plot.Plot{{lat, thr}}, tiles, body)
	lat.Draw(canvases[0][0])
	thr.Draw(canvases[0][1])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := cw.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// shorten cuts s to at most n runes, ending it with "…" when cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// thousands is v rounded, with thousands separated by commas.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// msLabel is a latency given in milliseconds, with about three significant
// digits, in µs below 1ms.
func msLabel(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.3gµs", v*1000)
	case v < 100:
		return fmt.Sprintf("%.3gms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}

// logTicks labels a log axis with the unit at 1, 2 and 5 times each power
// of ten, or at 1 and 3 times when it spans 3 decades or more (labels
// closer would touch), so that every labelled tick says what it is worth.
type logTicks struct{ unit string }

// Ticks implements plot.Ticker.
func (t logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	labelled := []float64{1, 2, 5}
	if math.Log10(hi/lo) >= 3 {
		labelled = []float64{1, 3}
	}
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for _, m := range labelled {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: t.label(v)})
		}
		for m := 2.0; m < 10; m++ { // unlabelled minor ticks
			if v := m * math.Pow(10, e); !slices.Contains(labelled, m) && v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v})
			}
		}
	}
	return ticks
}

// label is v's tick label: in seconds from 1000ms on, when the unit is ms.
func (t logTicks) label(v float64) string {
	if t.unit == "ms" && v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + t.unit
}

// linearTicks are plot.DefaultTicks labelled with thousands separated.
type linearTicks struct{}

// Ticks implements plot.Ticker.
func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = thousands(t.Value)
		}
	}
	return ticks
}

// bands shades the rows at rows across the whole plot.
type bands struct{ rows []float64 }

// Plot implements plot.Plotter.
func (b *bands) Plot(c draw.Canvas, p *plot.Plot) {
	_, ty := p.Transforms(&c)
	for _, y := range b.rows {
		lo, hi := max(ty(y-0.5), c.Min.Y), min(ty(y+0.5), c.Max.Y)
		c.FillPolygon(embeddedShade, []vg.Point{{X: c.Min.X, Y: lo}, {X: c.Max.X, Y: lo}, {X: c.Max.X, Y: hi}, {X: c.Min.X, Y: hi}})
	}
}

// rowLines draws a thin line between each two of n rows.
type rowLines struct{ n int }

// Plot implements plot.Plotter.
func (l *rowLines) Plot(c draw.Canvas, p *plot.Plot) {
	_, ty := p.Transforms(&c)
	style := draw.LineStyle{Color: color.Gray{0xcc}, Width: vg.Points(0.5)}
	for i := 1; i < l.n; i++ {
		y := ty(float64(i) - 0.5)
		c.StrokeLine2(style, c.Min.X, y, c.Max.X, y)
	}
}

// glyph is the style of a percentile's marks.
func glyph(shape draw.GlyphDrawer, c color.Color) draw.GlyphStyle {
	return draw.GlyphStyle{Shape: shape, Color: c, Radius: vg.Points(3)}
}
