package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
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

// startTable writes the line that describes the backends and returns a
// table of results whose first row is header.
func startTable(w io.Writer, env *backends, header string) *tabwriter.Writer {
	fmt.Fprintf(w, "%s\n\n", strings.Join(env.describe(), "; "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	return tw
}

func writeTable(w io.Writer, cfg *config, env *backends, results []result) error {
	fmt.Fprintf(w, "flash sale: %d buyers (%d click twice) for %d units, %d per buyer, %d calls in flight\n",
		cfg.buyers, cfg.repeaters(), cfg.stock, cfg.qty, cfg.concurrency)
	tw := startTable(w, env, "strategy\tstore\tsold\toversold\tlost\tleft\t"+
		"sold out\tcontention\tduplicate\terror\tretries\telapsed\treq/s\tp50\tp90\tp99\tmax\t")
	var notes []string
	for _, r := range results {
		notes = append(notes, r.notes()...)
		if r.Skipped != "" {
			continue
		}
		if !r.Ran {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", r.Strategy, r.Store)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2fs\t%.0f\t%s\t%s\t%s\t%s\t\n",
			r.Strategy, r.storeCell(), r.Sold, r.Oversold, r.Lost, r.Left,
			r.Insufficient, r.Contention, r.Duplicate, r.Errors, r.Retries,
			r.ElapsedMS/1000, r.Throughput, msString(r.P50MS), msString(r.P90MS), msString(r.P99MS), msString(r.MaxMS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	notes = append(notes, ceilingNotes(results)...)
	notes = append(notes, tieredNotes(results)...)
	if cfg.metrics {
		if err := writeMetricsTable(w, results); err != nil {
			return err
		}
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	_, err := fmt.Fprintln(w, "\nsold and left are units; sold out, contention, duplicate and error count refused requests;\n"+
		"oversold and lost come from the stock read back after the sale and must be 0; latencies are per request, retries included.\n"+
		"* embedded: the row's server ran in this process (miniredis, or a map): its speed is not a real server's.")
	return err
}

// ceilingNotes explains the ceiling rows and gives, for each Redis row that
// ran beside one, its throughput as a multiple of the ceiling's.
func ceilingNotes(results []result) []string {
	var notes []string
	for _, c := range results {
		if c.Strategy != "ceiling" || !c.Ran || c.Failure != "" {
			continue
		}
		notes = append(notes, fmt.Sprintf("%s/%s is a ceiling, not a strategy: one bare check-and-DECRBY EVALSHA per call on the same Redis, "+
			"client and concurrency; it never oversells, but it has no idempotency keys (%d repeat clicks bought a second time) and no resend protection",
			c.Strategy, c.Store, c.Rebought))
		for _, r := range results {
			if r.Ran && r.Failure == "" && r.Strategy != "ceiling" && r.Strategy != "memory" && r.Embedded == c.Embedded && usesRedis(r) && c.Throughput > 0 {
				notes = append(notes, fmt.Sprintf("%s/%s: %.2fx the ceiling's req/s (one sale each: rerun to see the spread)",
					r.Strategy, r.Store, r.Throughput/c.Throughput))
			}
		}
	}
	return notes
}

// usesRedis reports whether row r sold with one script call per Reduce on
// the sale's Redis (-redis, or its embedded miniredis), as the ceiling does.
func usesRedis(r result) bool {
	return r.Strategy == "luascript" || r.Strategy == "tiered" && !strings.HasPrefix(r.Where, "private")
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

// msString shows a latency with two decimals, or three below 0.1ms.
func msString(v float64) string {
	if v < 0.1 {
		return strconv.FormatFloat(v, 'f', 3, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
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
	fmt.Fprintf(w, "cart sale: %d carts of 1-%d lines over %d SKUs of %d units, 1-%d units a line; %.0f%% reserve and never pay, "+
		"%.0f%% ReduceLines, the others Reserve then Confirm; holds live %v, a reaper sweeps every %v; %d calls in flight\n",
		cfg.buyers, min(5, cfg.skus), cfg.skus, cfg.stock, cfg.qty, 100*cfg.abandon, 100*cfg.direct, cfg.holdTTL, cfg.reap, cfg.concurrency)
	tw := startTable(w, env, "strategy\tstore\tsold\theld\texpired\tleft\toversold\tlost\tcheck\t"+
		"sold out\tlate\tcontention\terror\tretries\telapsed\treleased in\treq/s\tp50\tp99\tmax\t")
	var notes []string
	for _, r := range results {
		notes = append(notes, r.notes()...)
		if r.Skipped != "" {
			continue
		}
		c := r.Carts
		if !r.Ran || c == nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", r.Strategy, r.Store)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%.2fs\t%.2fs\t%.0f\t%s\t%s\t%s\t\n",
			r.Strategy, r.storeCell(), r.Sold, c.Held, c.Expired, r.Left, r.Oversold, r.Lost, c.Check,
			r.Insufficient, c.Late, r.Contention, r.Errors, r.Retries,
			r.ElapsedMS/1000, c.ReleaseMS/1000, r.Throughput, msString(r.P50MS), msString(r.P99MS), msString(r.MaxMS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	_, err := fmt.Fprintln(w, "\nsold, held, expired and left are units over all SKUs: held is in holds when the buying ended, expired the units of holds\n"+
		"never confirmed (abandoned, or confirmed too late), which must all come back; left is read back after every hold's TTL.\n"+
		"check: per SKU, initial - available == sold - returned + held (no returns here) when the buying ended and after expiry (held 0).\n"+
		"sold out counts carts refused, late the Confirms that found their hold expired; released in: from the end of the buying to held 0.\n"+
		"* embedded: the row's server ran in this process (miniredis, or a map): its speed is not a real server's.")
	return err
}
