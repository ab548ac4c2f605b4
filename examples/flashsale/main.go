// Command flashsale races every stock strategy of
// github.com/stockkit/inventory on the same flash sale, many buyers on little
// stock, and prints a side-by-side table that fits 120 columns: units sold,
// oversold and left, refusals (sold out, contention), elapsed time,
// throughput and latency percentiles (-wide adds units lost, duplicates,
// errors, retries, p90 and max). It ends with a verdict per store: the fastest strategy that
// sold exactly (nothing oversold or lost, nothing left unsold to a buyer)
// and its multiple of the next one's throughput.
//
// Two rows are baselines, not strategies, and never a verdict: map, a
// mutex-guarded map in this process (no server, no I/O), and bare-script,
// one bare check-and-DECRBY EVALSHA per call on the sale's Redis (no
// idempotency keys: a repeat click buys twice), which runs only on a real
// Redis and whose multiple of the Redis verdict's throughput the verdict
// gives.
//
// With no flags it needs no server: Redis strategies run on in-process Redis
// servers (miniredis) and SQL strategies on a temporary SQLite file.
//
//	go run ./examples/flashsale                        # embedded defaults
//	go run ./examples/flashsale -services              # the servers of `make services`
//	go run ./examples/flashsale -redis 127.0.0.1:6379 -zk 127.0.0.1:2181 \
//	    -mysql 'root@tcp(127.0.0.1:3306)/test' -strategies luascript,optimistic/mysql,zklock
//
// Every buyer uses its id as idempotency key, and -repeat makes a share of
// them click "buy" twice: the second click of a buyer who bought is refused
// as a duplicate. A buyer
// refused with inventory.ErrContention, or whose call failed without a
// verdict, tries again through package retry (jittered exponential pauses
// from -backoff), up to -retries times, with the same key, so a retry never
// buys twice.
//
// The counts come from the backend, never from assumptions: after the sale
// each strategy's stock is read back, and "oversold" (units sold beyond the
// initial stock) and "lost" (initial - final differs from the units sold)
// are computed from it. The command exits with status 1 if any strategy
// oversold or lost a unit, could not run, did not finish within
// -sale-timeout, or had errors (requests that failed without a verdict
// once their retries were spent; a tiered row whose Redis -kill-redis-at
// killed excepted), naming each such row and why.
//
// The table goes to stdout (-format table, csv or json; the JSON fields are
// named as the CSV columns, and a strategy that did not run is "ran": false
// with no measures); a progress line goes to stderr when stderr is a
// terminal or -progress is set (requests answered, units sold, the rate so
// far and an ETA at that rate). The chart of a sale is drawn by the command
// examples/flashsale/chart from the JSON report, so that this one does not
// build the plotting library:
//
//	go run ./examples/flashsale -format json | go run ./examples/flashsale/chart -o sale.png
//
// Its Redis keys, ZooKeeper nodes and SQL tables are named after -prefix
// (default flashsale).
//
// With -metrics every strategy is wrapped in the otelstock decorator,
// recording into an OpenTelemetry SDK meter of the sale's own, and the
// report adds its counters of Reduce by outcome (every attempt, retries
// included) and its units beside the sale's own table: calls = requests +
// retries, ok = buyers who bought, contention + error = retries + requests
// that gave up, units = sold. A row whose counters disagree fails.
//
// With -services (or -mysql / -postgres) the report has sqllock rows on
// MariaDB and PostgreSQL, its advisory locks on a pool of their own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stockkit/inventory/examples/internal/cli"
)

func main() { cli.Main("flashsale", run) }

// errUsage reports bad flags; the flag package has already said why.
var errUsage = cli.ErrUsage

// run is the whole program: it parses args, runs the sale over every selected
// strategy, and writes the report to stdout and progress to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	env := newBackends(cfg)
	defer env.close()

	var results []result
	var failed []error
	for _, tg := range env.targets() {
		if !cfg.selected(tg.strategy, tg.store) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		r := result{Strategy: tg.strategy, Store: tg.store, Skipped: tg.skip}
		if tg.skip == "" {
			r = runSale(ctx, cfg, env, tg, stderr)
		}
		if r.Failure != "" {
			failed = append(failed, fmt.Errorf("%s/%s: %s", r.Strategy, r.Store, r.Failure))
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return fmt.Errorf("-strategies %q selects nothing; strategies: %s", cfg.strategies, strategyNames)
	}
	if err := write(stdout, cfg, env, results); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	return errors.Join(failed...)
}
