package main

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// write writes the report in cfg.format.
func write(w io.Writer, cfg *config, env *backends, results []result) error {
	switch cfg.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	case "csv":
		if cfg.carts {
			return writeCartsCSV(w, results)
		}
		return writeCSV(w, results)
	}
	if cfg.carts {
		return writeCartsTable(w, cfg, env, results)
	}
	return writeTable(w, cfg, env, results)
}

// columns are the CSV's, named as the JSON's fields.
var columns = []string{
	"strategy", "store", "ran", "buyers", "requests", "initial", "sold", "oversold", "lost", "left",
	"insufficient", "contention", "duplicate", "errors", "retries", "rebought", "unknown",
	"elapsed_ms", "throughput_rps", "p50_ms", "p90_ms", "p99_ms", "max_ms", "where", "embedded", "skipped", "failure", "first_error",
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
			i(r.Insufficient), i(r.Contention), i(r.Duplicate), i(r.Errors), i(r.Retries), i(r.Rebought), i(r.Unknown),
			f(r.ElapsedMS), f(r.Throughput), f(r.P50MS), f(r.P90MS), f(r.P99MS), f(r.MaxMS), r.Where, strconv.FormatBool(r.Embedded),
			r.Skipped, r.Failure, r.FirstError,
		})
	}
	cw.Flush()
	return cw.Error()
}

// notes are the table's notes on r: that it did not run, or failed, and
// its first error.
func (r result) notes() []string {
	if r.Skipped != "" {
		return []string{fmt.Sprintf("%s/%s did not run: %s", r.Strategy, r.Store, r.Skipped)}
	}
	var notes []string
	if r.Failure != "" {
		notes = append(notes, fmt.Sprintf("%s/%s FAILED: %s", r.Strategy, r.Store, r.Failure))
	}
	if r.FirstError != "" {
		notes = append(notes, fmt.Sprintf("%s/%s: first error: %s", r.Strategy, r.Store, r.FirstError))
	}
	return notes
}

// storeCell is r's store as the tables show it, starred when embedded.
func (r result) storeCell() string {
	if r.Embedded {
		return r.Store + "*"
	}
	return r.Store
}

// width is what the report fits in without -wide: the table, and every
// line of text, wrapped.
const width = 120

// column is a column of a table: its header, whether only -wide shows it,
// and its cell in a row that ran.
type column struct {
	header string
	wide   bool
	cell   func(result) string
}

// count is a column of an integer.
func count(header string, wide bool, v func(result) int64) column {
	return column{header, wide, func(r result) string { return strconv.FormatInt(v(r), 10) }}
}

// latency is a column of a latency in milliseconds.
func latency(header string, wide bool, v func(result) float64) column {
	return column{header, wide, func(r result) string { return msString(v(r)) }}
}

// saleColumns are the single-SKU table's; the strategy and store come first.
var saleColumns = []column{
	count("sold", false, func(r result) int64 { return r.Sold }),
	count("oversold", false, func(r result) int64 { return r.Oversold }),
	count("lost", true, func(r result) int64 { return r.Lost }),
	count("left", false, func(r result) int64 { return r.Left }),
	count("sold out", false, func(r result) int64 { return r.Insufficient }),
	count("contention", false, func(r result) int64 { return r.Contention }),
	count("duplicate", true, func(r result) int64 { return r.Duplicate }),
	count("error", true, func(r result) int64 { return r.Errors }),
	count("retries", true, func(r result) int64 { return r.Retries }),
	{"elapsed", false, func(r result) string { return fmt.Sprintf("%.2fs", r.ElapsedMS/1000) }},
	{"req/s", false, func(r result) string { return fmt.Sprintf("%.0f", r.Throughput) }},
	latency("p50", false, func(r result) float64 { return r.P50MS }),
	latency("p90", true, func(r result) float64 { return r.P90MS }),
	latency("p99", false, func(r result) float64 { return r.P99MS }),
	latency("max", true, func(r result) float64 { return r.MaxMS }),
}

// cartTableColumns are the cart table's (-carts).
var cartTableColumns = []column{
	count("sold", false, func(r result) int64 { return r.Sold }),
	count("held", true, func(r result) int64 { return r.Carts.Held }),
	count("expired", false, func(r result) int64 { return r.Carts.Expired }),
	count("left", false, func(r result) int64 { return r.Left }),
	count("oversold", false, func(r result) int64 { return r.Oversold }),
	count("lost", true, func(r result) int64 { return r.Lost }),
	{"check", false, func(r result) string { return r.Carts.Check }},
	count("sold out", false, func(r result) int64 { return r.Insufficient }),
	count("late", false, func(r result) int64 { return r.Carts.Late }),
	count("contention", true, func(r result) int64 { return r.Contention }),
	count("error", true, func(r result) int64 { return r.Errors }),
	count("retries", true, func(r result) int64 { return r.Retries }),
	{"elapsed", false, func(r result) string { return fmt.Sprintf("%.2fs", r.ElapsedMS/1000) }},
	{"released in", true, func(r result) string { return fmt.Sprintf("%.2fs", r.Carts.ReleaseMS/1000) }},
	{"req/s", false, func(r result) string { return fmt.Sprintf("%.0f", r.Throughput) }},
	latency("p50", false, func(r result) float64 { return r.P50MS }),
	latency("p99", false, func(r result) float64 { return r.P99MS }),
	latency("max", true, func(r result) float64 { return r.MaxMS }),
}

// writeRows writes the backends line and the table of results in columns
// (those without wide unless cfg.wide), and returns the rows' notes.
func writeRows(w io.Writer, cfg *config, env *backends, results []result, columns []column) ([]string, error) {
	fmt.Fprintf(w, "%s\n\n", wrap(strings.Join(env.describe(), "; "), width))
	var shown []column
	for _, c := range columns {
		if cfg.wide || !c.wide {
			shown = append(shown, c)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cells := []string{"strategy", "store"}
	for _, c := range shown {
		cells = append(cells, c.header)
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	var notes []string
	for _, r := range results {
		notes = append(notes, r.notes()...)
		if r.Skipped != "" {
			continue
		}
		cells = []string{r.Strategy, r.storeCell()}
		for _, c := range shown {
			v := "-"
			if r.Ran && (r.Carts != nil || !cfg.carts) {
				v = c.cell(r)
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return notes, tw.Flush()
}

func writeTable(w io.Writer, cfg *config, env *backends, results []result) error {
	fmt.Fprintln(w, wrap(fmt.Sprintf("flash sale: %d buyers (%d click twice) for %d units, %d per buyer, %d calls in flight",
		cfg.buyers, cfg.repeaters(), cfg.stock, cfg.qty, cfg.concurrency), width))
	notes, err := writeRows(w, cfg, env, results, saleColumns)
	if err != nil {
		return err
	}
	notes = append(notes, baselineNotes(results)...)
	notes = append(notes, tieredNotes(results)...)
	if cfg.metrics {
		if err := writeMetricsTable(w, results); err != nil {
			return err
		}
	}
	writeNotes(w, notes)
	fmt.Fprintln(w, "\n"+wrap("sold and left are units; sold out and contention (gave up after -retries) count refused requests (-wide: duplicate and error too); "+
		"oversold and lost come from the stock read back after the sale and must be 0; latencies are per request, retries included; "+
		"-wide adds lost, duplicate, error, retries, p90 and max.", width))
	fmt.Fprintln(w, wrap("* embedded: the row's server ran in this process (miniredis): its speed is not a real server's.", width))
	return writeVerdicts(w, cfg, results)
}

// writeNotes writes notes, each wrapped, its next lines indented.
func writeNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintln(w, wrap(n, width))
	}
}

// wrap breaks s into lines of at most n columns at spaces (a word longer
// than n stays whole), indenting every line after the first by two.
func wrap(s string, n int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		l := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case line+1+l > n:
			b.WriteString("\n  ")
			line = 2
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += l
	}
	return b.String()
}

// isBaseline reports whether r is a baseline, not a strategy: the
// in-process map, or the bare script without keys.
func isBaseline(r result) bool { return r.Strategy == "map" || r.Strategy == "bare-script" }

// exact reports whether r sold exactly: it ran without a failure, sold no
// unit twice and lost none, and sold every unit its buyers asked for up to
// the stock (with -carts: its stock check held).
func exact(cfg *config, r result) bool {
	if !r.Ran || r.Failure != "" || r.Oversold != 0 || r.Lost != 0 {
		return false
	}
	if r.Carts != nil {
		return r.Carts.Check == "ok"
	}
	return r.Sold == min(r.Initial/cfg.qty, int64(r.Buyers))*cfg.qty
}

// writeVerdicts ends the report with a line per store: the fastest
// strategy that sold exactly, and by how much it beat the next.
func writeVerdicts(w io.Writer, cfg *config, results []result) error {
	var stores []string
	byStore := map[string][]result{}
	for _, r := range results {
		if !r.Ran || isBaseline(r) {
			continue
		}
		if byStore[r.Store] == nil {
			stores = append(stores, r.Store)
		}
		byStore[r.Store] = append(byStore[r.Store], r)
	}
	if len(stores) > 0 {
		fmt.Fprintln(w, "\nverdict: per store, the fastest strategy that sold exactly (no unit oversold or lost, none left unsold to a buyer):")
	}
	for _, store := range stores {
		var ok []result
		for _, r := range byStore[store] {
			if exact(cfg, r) {
				ok = append(ok, r)
			}
		}
		slices.SortStableFunc(ok, func(a, b result) int { return cmp.Compare(b.Throughput, a.Throughput) })
		var v string
		switch len(ok) {
		case 0:
			v = fmt.Sprintf("%s: none of %d sold exactly", store, len(byStore[store]))
		case 1:
			v = fmt.Sprintf("%s: %s, %.0f req/s, the only one that sold exactly", store, ok[0].Strategy, ok[0].Throughput)
			if len(byStore[store]) == 1 {
				v = fmt.Sprintf("%s: %s, %.0f req/s, sold exactly (the only strategy on this store)", store, ok[0].Strategy, ok[0].Throughput)
			}
		default:
			v = fmt.Sprintf("%s: %s, %.0f req/s, %.1fx the next, %s (%.0f req/s)", store, ok[0].Strategy, ok[0].Throughput,
				ok[0].Throughput/ok[1].Throughput, ok[1].Strategy, ok[1].Throughput)
		}
		if len(ok) > 0 {
			if n := len(byStore[store]) - len(ok); n > 0 && len(ok) > 1 {
				v += fmt.Sprintf("; %d did not sell exactly", n)
			}
			for _, b := range results {
				if b.Strategy == "bare-script" && b.Store == store && b.Ran && b.Failure == "" && b.Throughput > 0 {
					v += fmt.Sprintf("; the bare script without keys did %.2fx %s's req/s", b.Throughput/ok[0].Throughput, ok[0].Strategy)
				}
			}
			if ok[0].Embedded {
				v += "; embedded: not a real server's speed"
			}
		}
		if _, err := fmt.Fprintln(w, "  "+strings.ReplaceAll(wrap(v, width-2), "\n", "\n  ")); err != nil {
			return err
		}
	}
	return nil
}

// baselineNotes says what the baseline rows are.
func baselineNotes(results []result) []string {
	var notes []string
	for _, b := range results {
		if !b.Ran || !isBaseline(b) {
			continue
		}
		if b.Strategy == "map" {
			notes = append(notes, fmt.Sprintf("%s/%s is a baseline, not a strategy: a mutex-guarded map in this process, no server and no I/O.", b.Strategy, b.Store))
			continue
		}
		notes = append(notes, fmt.Sprintf("%s/%s is a baseline, not a strategy: one bare check-and-DECRBY EVALSHA per call on the same Redis, "+
			"client and concurrency; it never oversells, but it has no idempotency keys (%d repeat clicks bought a second time) and no resend protection "+
			"(one sale each: rerun to see the spread).", b.Strategy, b.Store, b.Rebought))
	}
	return notes
}

// tieredNotes says, per tiered row, who sold the units and what Reconcile
// found after the sale.
func tieredNotes(results []result) []string {
	var notes []string
	for _, r := range results {
		t := r.Tiered
		if t == nil {
			continue
		}
		kill := ""
		if t.KilledAt >= 0 {
			kill = fmt.Sprintf("Redis SIGKILLed after %d units sold; ", t.KilledAt)
		}
		drift := "clean"
		if !t.Clean {
			drift = fmt.Sprintf("lost %d, excess %d, %d grants Redis had missed applied (repaired; after a fallback, Redis's view of the pool is fixed too)",
				t.Lost, t.Excess, t.GrantsApplied)
		}
		unknown := ""
		if r.Unknown > 0 {
			unknown = fmt.Sprintf("; %d calls without keys failed without a verdict (not retried)", r.Unknown)
		}
		notes = append(notes, fmt.Sprintf("%s/%s: %sRedis sold %d, SQL alone (fallback) sold %d in %d calls; after the sale SQL's pool %d, Redis's allotment %d before Reconcile; Reconcile: %s%s",
			r.Strategy, r.Store, kill, t.RedisSold, t.FallbackSold, t.Fallbacks, t.Pool, t.Allotment, drift, unknown))
	}
	return notes
}

// writeMetricsTable writes, per row, the Reduce calls the otelstock
// decorator counted, beside the sale's own counts above.
func writeMetricsTable(w io.Writer, results []result) error {
	fmt.Fprintln(w, "\notelstock's counters (inventory.client.operations, reduce, every attempt; units: inventory.client.units):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tstore\tcalls\tok\tinsufficient\tduplicate\tcontention\terror\tunits\thist p50\thist p99\tagrees\t")
	for _, r := range results {
		m := r.Metrics
		if m == nil {
			continue
		}
		agrees := "yes"
		if strings.HasPrefix(r.Failure, "-metrics") {
			agrees = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t≤%gms\t≤%gms\t%s\t\n", r.Strategy, r.Store,
			m.Calls, m.OK, m.Insufficient, m.Duplicate, m.Contention, m.Errors+m.NotFound+m.Invalid, m.Units, m.P50MS, m.P99MS, agrees)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "calls = requests + retries; ok = buyers who bought; contention + error = retries + gave up; units = sold.")
	return err
}

// msString shows a latency given in milliseconds with three significant
// digits, in µs below 1ms and in s from 1000ms.
func msString(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.3gµs", v*1000)
	case v < 1000:
		return fmt.Sprintf("%.3gms", v)
	}
	return fmt.Sprintf("%.3gs", v/1000)
}

// cartColumns are the CSV's with -carts: the cart sale's figures after the
// row's own.
var cartColumns = []string{"skus", "held", "expired", "abandoned", "late", "held_after", "release_ms", "released", "check"}

func writeCartsCSV(w io.Writer, results []result) error {
	var b strings.Builder
	if err := writeCSV(&b, results); err != nil {
		return err
	}
	records, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		return err
	}
	cw := csv.NewWriter(w)
	_ = cw.Write(append(records[0], cartColumns...))
	for i, r := range results {
		row := records[i+1]
		if c := r.Carts; c != nil {
			i := func(n int64) string { return strconv.FormatInt(n, 10) }
			row = append(row, strconv.Itoa(c.SKUs), i(c.Held), i(c.Expired), i(c.Abandoned), i(c.Late), i(c.HeldAfter),
				strconv.FormatFloat(c.ReleaseMS, 'f', 3, 64), i(c.Released), c.Check)
		} else {
			row = append(row, make([]string, len(cartColumns))...)
		}
		_ = cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

func writeCartsTable(w io.Writer, cfg *config, env *backends, results []result) error {
	fmt.Fprintln(w, wrap(fmt.Sprintf("cart sale: %d carts of 1-%d lines over %d SKUs of %d units, 1-%d units a line; %.0f%% reserve and never pay, "+
		"%.0f%% ReduceLines, the others Reserve then Confirm; holds live %v, a reaper sweeps every %v; %d calls in flight",
		cfg.buyers, min(5, cfg.skus), cfg.skus, cfg.stock, cfg.qty, 100*cfg.abandon, 100*cfg.direct, cfg.holdTTL, cfg.reap, cfg.concurrency), width))
	notes, err := writeRows(w, cfg, env, results, cartTableColumns)
	if err != nil {
		return err
	}
	writeNotes(w, notes)
	fmt.Fprintln(w, "\n"+wrap("sold, held, expired and left are units over all SKUs: held is in holds when the buying ended, expired the units of holds "+
		"never confirmed (abandoned, or confirmed too late), which must all come back; left is read back after every hold's TTL. "+
		"check: per SKU, initial - available == sold - returned + held (no returns here) when the buying ended and after expiry (held 0). "+
		"sold out counts carts refused, late the Confirms that found their hold expired; released in: from the end of the buying to held 0. "+
		"-wide adds held, lost, contention, error, retries, released in and max.", width))
	fmt.Fprintln(w, wrap("* embedded: the row's server ran in this process (miniredis): its speed is not a real server's.", width))
	return writeVerdicts(w, cfg, results)
}
