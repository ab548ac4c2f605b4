package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// percentiles are the latency marks of the chart, with their glyphs.
var percentiles = []struct {
	name  string
	value func(result) float64
	shape draw.GlyphDrawer
	color color.Color
}{
	{"p50", func(r result) float64 { return r.P50MS }, draw.CircleGlyph{}, color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
	{"p90", func(r result) float64 { return r.P90MS }, draw.TriangleGlyph{}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff}},
	{"p99", func(r result) float64 { return r.P99MS }, draw.BoxGlyph{}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}},
	{"max", func(r result) float64 { return r.MaxMS }, draw.CrossGlyph{}, color.RGBA{0xd6, 0x27, 0x28, 0xff}},
}

// embeddedShade is the band behind the rows whose server ran in process.
var embeddedShade = color.RGBA{0xee, 0xe4, 0xc8, 0xff}

// writeChart writes a chart of every row that ran to path, a PNG or an SVG
// (by its extension): on the left each row's request latency percentiles
// (p50, p90, p99, max) on a log axis in milliseconds, on the right its
// throughput on a log axis in requests per second. Each row is labelled
// with its strategy, its store and where the store ran; rows whose server
// ran in this process (miniredis) are shaded and starred.
func writeChart(path string, cfg *config, results []result) error {
	var ran []result
	for _, r := range results {
		if r.Ran && r.Requests > 0 {
			ran = append(ran, r)
		}
	}
	if len(ran) == 0 {
		return fmt.Errorf("-chart: no strategy ran: nothing to draw")
	}
	// Row i is drawn at y = n-1-i, so the report's first row is on top.
	n := len(ran)
	y := func(i int) float64 { return float64(n - 1 - i) }
	labels := make([]string, n)
	for i, r := range ran {
		where := r.Where
		if r.Embedded {
			where += " *"
		}
		labels[n-1-i] = r.Strategy + " / " + r.Store + "\n" + where
	}

	lat := plot.New()
	lat.Title.Text = "Latency per request, retries included"
	lat.X.Label.Text = "milliseconds (log scale)"
	lat.X.Scale = plot.LogScale{}
	lat.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.NominalY(labels...)
	lat.Y.Min, lat.Y.Max = -0.5, float64(n)-0.5
	lat.Y.Tick.Label.Font.Size = vg.Points(9)
	lat.Add(&bands{rows: embeddedRows(ran, y)}, plotter.NewGrid())
	lo, hi := math.Inf(1), 0.0
	for _, r := range ran {
		for _, p := range percentiles {
			v := max(p.value(r), 1e-3)
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	lat.X.Min, lat.X.Max = decadeBelow(lo), decadeAbove(hi)
	for i, r := range ran {
		span, err := plotter.NewLine(plotter.XYs{{X: max(r.P50MS, 1e-3), Y: y(i)}, {X: max(r.MaxMS, 1e-3), Y: y(i)}})
		if err != nil {
			return err
		}
		span.Color = color.Gray{0x99}
		span.Width = vg.Points(1.5)
		lat.Add(span)
	}
	for _, p := range percentiles {
		xys := make(plotter.XYs, n)
		for i, r := range ran {
			xys[i] = plotter.XY{X: max(p.value(r), 1e-3), Y: y(i)}
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		s.GlyphStyle = glyph(p.shape, p.color)
		lat.Add(s)
	}

	thr := plot.New()
	thr.Title.Text = "Throughput"
	thr.X.Label.Text = "requests per second (log scale)"
	thr.X.Scale = plot.LogScale{}
	thr.X.Tick.Marker = humanTicks{}
	thr.NominalY(make([]string, n)...)
	thr.Y.Min, thr.Y.Max = -0.5, float64(n)-0.5
	thr.Add(&bands{rows: embeddedRows(ran, y)}, plotter.NewGrid())
	lo, hi = math.Inf(1), 0.0
	for _, r := range ran {
		lo, hi = min(lo, r.Throughput), max(hi, r.Throughput)
	}
	thr.X.Min, thr.X.Max = decadeBelow(lo)/10, decadeAbove(hi) // every bar at least a decade long
	bar := color.RGBA{0x44, 0x77, 0xaa, 0xff}
	for i, r := range ran {
		l, err := plotter.NewLine(plotter.XYs{{X: thr.X.Min, Y: y(i)}, {X: r.Throughput, Y: y(i)}})
		if err != nil {
			return err
		}
		l.Color, l.Width = bar, vg.Points(6)
		thr.Add(l)
		v, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: r.Throughput, Y: y(i)}}, Labels: []string{fmt.Sprintf(" %.0f", r.Throughput)}})
		if err != nil {
			return err
		}
		for j := range v.TextStyle {
			v.TextStyle[j].Font.Size = vg.Points(8)
			v.TextStyle[j].YAlign = draw.YCenter
		}
		thr.Add(v)
	}

	const header, footer = vg.Length(0.75 * vg.Inch), vg.Length(0.35 * vg.Inch)
	width := 13 * vg.Inch
	height := header + footer + vg.Length(1.1)*vg.Inch + vg.Length(n)*0.42*vg.Inch
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	cw, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	title := lat.Title.TextStyle
	title.Font.Size = vg.Points(14)
	title.XAlign, title.YAlign = draw.XLeft, draw.YTop
	dc.FillText(title, vg.Point{X: 0.2 * vg.Inch, Y: height - 0.12*vg.Inch},
		fmt.Sprintf("Flash sale: %d buyers (%d click twice) for %d units, %d per buyer, %d calls in flight, each strategy on its own SKU",
			cfg.buyers, cfg.repeaters(), cfg.stock, cfg.qty, cfg.concurrency))
	// The legend, on one line under the title.
	key := lat.Title.TextStyle
	key.Font.Size = vg.Points(10)
	key.XAlign, key.YAlign = draw.XLeft, draw.YCenter
	at := vg.Point{X: 0.3 * vg.Inch, Y: height - 0.52*vg.Inch}
	for _, p := range percentiles {
		dc.DrawGlyph(glyph(p.shape, p.color), at)
		at.X += 0.12 * vg.Inch
		dc.FillText(key, at, p.name+" latency")
		at.X += 1.0 * vg.Inch
	}
	dc.FillPolygon(embeddedShade, []vg.Point{{X: at.X - 0.08*vg.Inch, Y: at.Y - 0.08*vg.Inch}, {X: at.X + 0.08*vg.Inch, Y: at.Y - 0.08*vg.Inch},
		{X: at.X + 0.08*vg.Inch, Y: at.Y + 0.08*vg.Inch}, {X: at.X - 0.08*vg.Inch, Y: at.Y + 0.08*vg.Inch}})
	at.X += 0.14 * vg.Inch
	dc.FillText(key, at, "* embedded server: ran inside this process")
	note := lat.Title.TextStyle
	note.Font.Size = vg.Points(9)
	note.XAlign, note.YAlign = draw.XLeft, draw.YBottom
	dc.FillText(note, vg.Point{X: 0.2 * vg.Inch, Y: 0.1 * vg.Inch},
		"* embedded: the server ran inside the flashsale process (miniredis); its latency and throughput are not a real server's. "+
			"Rows are in the order of the report; latencies include retries after contention.")
	body := draw.Crop(dc, 0, 0, footer, -header)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 0.3 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.2 * vg.Inch}
	canvases := plot.Align([][]*plot.Plot{{lat, thr}}, tiles, body)
	// The latency panel needs the room for the row labels.
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

// humanTicks are log ticks labelled 1, 10, 100, 1k, 10k, 100k, 1M.
type humanTicks struct{}

// Ticks implements plot.Ticker.
func (humanTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label == "" {
			continue
		}
		switch v := t.Value; {
		case v >= 1e6:
			ticks[i].Label = fmt.Sprintf("%gM", v/1e6)
		case v >= 1e3:
			ticks[i].Label = fmt.Sprintf("%gk", v/1e3)
		}
	}
	return ticks
}

// decadeBelow and decadeAbove are the powers of ten around v.
func decadeBelow(v float64) float64 { return math.Pow(10, math.Floor(math.Log10(v))) }
func decadeAbove(v float64) float64 { return math.Pow(10, math.Ceil(math.Log10(v)+1e-9)) }

// embeddedRows are the y of the rows whose server ran in process.
func embeddedRows(ran []result, y func(int) float64) []float64 {
	var rows []float64
	for i, r := range ran {
		if r.Embedded {
			rows = append(rows, y(i))
		}
	}
	return rows
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

// glyph is the style of a percentile's marks.
func glyph(shape draw.GlyphDrawer, c color.Color) draw.GlyphStyle {
	return draw.GlyphStyle{Shape: shape, Color: c, Radius: vg.Points(3.5)}
}
