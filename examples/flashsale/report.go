package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"text/template"
)

// write writes the report in cfg.format.
func write(w io.Writer, cfg *config, env *backends, results []result) error {
	switch cfg.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	case "csv":
		return writeCSV(w, results)
	}
	return writeTable(w, cfg, env, results)
}

// columns are the CSV's, named as the JSON's fields.
var columns = []string{
	"strategy", "store", "ran", "buyers", "requests", "initial", "sold", "oversold", "lost", "left",
	"insufficient", "contention", "duplicate", "errors", "retries",
	"elapsed_ms", "throughput_rps", "p50_ms", "p99_ms", "skipped", "failure", "first_error",
}

func writeCSV(w io.Writer, results []result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(columns)
	for _, r := range results {
		i := func(n int64) string { return strconv.FormatInt(n, 10) }
		f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
		if !r.Ran {
			// No measures: empty cells, not zeros.
			row := make([]string, len(columns))
			row[0], row[1], row[2] = r.Strategy, r.Store, "false"
			row[len(row)-3], row[len(row)-2] = r.Skipped, r.Failure
			_ = cw.Write(row)
			continue
		}
		_ = cw.Write([]string{
			r.Strategy, r.Store, "true", strconv.Itoa(r.Buyers), i(r.Requests), i(r.Initial), i(r.Sold), i(r.Oversold), i(r.Lost), i(r.Left),
			i(r.Insufficient), i(r.Contention), i(r.Duplicate), i(r.Errors), i(r.Retries),
			f(r.ElapsedMS), f(r.Throughput), f(r.P50MS), f(r.P99MS), r.Skipped, r.Failure, r.FirstError,
		})
	}
	cw.Flush()
	return cw.Error()
}

func writeTable(w io.Writer, cfg *config, env *backends, results []result) error {
	fmt.Fprintf(w, "flash sale: %d buyers (%d click twice) for %d units, %d per buyer, %d calls in flight\n",
		cfg.buyers, cfg.repeaters(), cfg.stock, cfg.qty, cfg.concurrency)
	fmt.Fprintf(w, "%s\n\n", strings.Join(env.describe(), "; "))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tstore\tsold\toversold\tlost\tleft\t"+
		"sold out\tcontention\tduplicate\terror\tretries\telapsed\treq/s\tp50\tp99\t")
	var notes []string
	for _, r := range results {
		switch {
		case r.Skipped != "":
			notes = append(notes, fmt.Sprintf("%s/%s did not run: %s", r.Strategy, r.Store, r.Skipped))
			continue
		case r.Failure != "":
			notes = append(notes, fmt.Sprintf("%s/%s FAILED: %s", r.Strategy, r.Store, r.Failure))
		}
		if r.FirstError != "" {
			notes = append(notes, fmt.Sprintf("%s/%s: first error: %s", r.Strategy, r.Store, r.FirstError))
		}
		if !r.Ran {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", r.Strategy, r.Store)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2fs\t%.0f\t%.2fms\t%.2fms\t\n",
			r.Strategy, r.Store, r.Sold, r.Oversold, r.Lost, r.Left,
			r.Insufficient, r.Contention, r.Duplicate, r.Errors, r.Retries,
			r.ElapsedMS/1000, r.Throughput, r.P50MS, r.P99MS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	_, err := fmt.Fprintln(w, "\nsold and left are units; sold out, contention, duplicate and error count refused requests;\n"+
		"oversold and lost come from the stock read back after the sale and must be 0.")
	return err
}

// chart is a horizontal bar chart per measure, one bar per strategy that ran.
// Its text is our own strategy and store names and numbers: nothing to escape.
var chart = template.Must(template.New("chart").Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="20" font-size="14" font-weight="bold">{{.Title}}</text>
{{- range .Panels}}
<text x="{{.X}}" y="44" font-weight="bold">{{.Title}}</text>
{{- range .Bars}}
<text x="{{.LabelX}}" y="{{.TextY}}" text-anchor="end">{{.Label}}</text>
<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="16" fill="{{.Color}}"/>
<text x="{{.ValueX}}" y="{{.TextY}}">{{.Value}}</text>
{{- end}}
{{- end}}
</svg>
`))

type panel struct {
	Title string
	X     int
	Bars  []bar
}

type bar struct {
	Label, Value, Color            string
	LabelX, X, Y, W, ValueX, TextY int
}

// writeChart writes an SVG of the throughput and the p99 latency of every
// strategy that ran.
func writeChart(path string, cfg *config, results []result) error {
	var ran []result
	for _, r := range results {
		if r.Ran && r.Requests > 0 {
			ran = append(ran, r)
		}
	}
	const labelW, barW, panelW, rowH, top = 200, 260, 560, 24, 56
	measures := []struct {
		title, color string
		value        func(result) float64
		format       string
	}{
		{"throughput (requests/s, log scale)", "#4878a8", func(r result) float64 { return r.Throughput }, "%.0f"},
		{"p99 latency (ms, log scale)", "#c05048", func(r result) float64 { return r.P99MS }, "%.2f"},
	}
	data := struct {
		Title         string
		Width, Height int
		Panels        []panel
	}{
		Title:  fmt.Sprintf("flash sale: %d buyers, %d units", cfg.buyers, cfg.stock),
		Width:  len(measures) * panelW,
		Height: top + len(ran)*rowH + 10,
	}
	for pi, m := range measures {
		x0 := pi * panelW
		p := panel{Title: m.title, X: x0 + 10}
		// Bars are log(1+v): the strategies differ by orders of magnitude.
		top1 := 1e-9
		for _, r := range ran {
			top1 = max(top1, math.Log1p(m.value(r)))
		}
		for i, r := range ran {
			v := m.value(r)
			w := int(float64(barW) * math.Log1p(v) / top1)
			y := top + i*rowH
			p.Bars = append(p.Bars, bar{
				Label: r.Strategy + "/" + r.Store, Value: fmt.Sprintf(m.format, v), Color: m.color,
				LabelX: x0 + labelW - 6, X: x0 + labelW, Y: y, W: w, ValueX: x0 + labelW + w + 4, TextY: y + 13,
			})
		}
		data.Panels = append(data.Panels, p)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chart.Execute(f, data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
