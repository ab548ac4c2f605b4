package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/retry"
)

// result is one row of the report. Its JSON names are the CSV's columns.
// A row that did not run has only strategy, store, ran, skipped and
// failure: it has no measures, not measures of zero.
type result struct {
	Strategy string `json:"strategy"`
	Store    string `json:"store"`
	// Where says where the store (and the locks) live: a server's address,
	// or an embedded server in this process, whose speed is not a real
	// server's.
	Where string `json:"where"`
	// Embedded is true when a server of the row ran in this process
	// (miniredis): its figures measure the process, not a real server.
	Embedded bool `json:"embedded"`
	// Ran says whether the sale started: false when the strategy was
	// skipped or could not be set up, and then every measure is missing.
	Ran bool `json:"ran"`
	// Skipped says why the strategy did not run and how to make it run.
	Skipped string `json:"skipped"`
	// Failure says why the row is a failure: the strategy could not be set
	// up, its stock could not be read back, it oversold or it lost units.
	Failure string `json:"failure"`

	Buyers   int   `json:"buyers"`
	Requests int64 `json:"requests"` // calls answered, repeat clicks included
	Initial  int64 `json:"initial"`
	Left     int64 `json:"left"` // the stock read back after the sale
	Sold     int64 `json:"sold"` // units sold: qty times the buyers who bought
	Oversold int64 `json:"oversold"`
	Lost     int64 `json:"lost"`

	Insufficient int64 `json:"insufficient"` // requests refused: sold out
	Contention   int64 `json:"contention"`   // requests refused: gave up after -retries
	Duplicate    int64 `json:"duplicate"`    // requests refused: the buyer had bought already
	// Rebought counts, on a row without idempotency keys (the bare script),
	// the repeat clicks that bought a second time: a keyed strategy
	// refuses them as duplicates.
	Rebought   int64  `json:"rebought"`
	Errors     int64  `json:"errors"` // requests failed otherwise
	FirstError string `json:"first_error"`
	Retries    int64  `json:"retries"` // calls repeated after ErrContention or an error

	ElapsedMS  float64 `json:"elapsed_ms"`
	Throughput float64 `json:"throughput_rps"` // requests per second
	P50MS      float64 `json:"p50_ms"`         // request latency, retries included
	P90MS      float64 `json:"p90_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`

	// Metrics are what the otelstock decorator counted, with -metrics.
	Metrics *saleMetrics `json:"metrics,omitempty"`
	// Unknown counts, on a row without keys, the calls that failed without
	// a verdict: each may have taken its units, and is not retried.
	Unknown int64 `json:"unknown"`
	// Tiered is the tiered rows' part: who sold, and Reconcile's drift.
	Tiered *tieredResult `json:"tiered,omitempty"`
	// Carts is the cart sale's part of the row, with -carts.
	Carts *cartResult `json:"carts,omitempty"`
}

// MarshalJSON writes a row that did not run without measures.
func (r result) MarshalJSON() ([]byte, error) {
	type plain result // result without this method
	if r.Ran {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		Strategy string `json:"strategy"`
		Store    string `json:"store"`
		Ran      bool   `json:"ran"`
		Skipped  string `json:"skipped"`
		Failure  string `json:"failure"`
	}{r.Strategy, r.Store, r.Ran, r.Skipped, r.Failure})
}

// buyer is what one buyer saw.
type buyer struct {
	bought    bool
	buys      int64           // calls that took units: more than one only without a key
	ambiguous bool            // a call failed without saying whether it took effect
	latencies []time.Duration // one per click
}

// counts are the refusals and retries, shared by all buyers.
type counts struct {
	requests, insufficient, contention, duplicate, errors, retries atomic.Int64
	unknown                                                        atomic.Int64 // keyless rows: calls failed without a verdict
	sold                                                           atomic.Int64 // units sold so far
	rebought                                                       atomic.Int64 // keyless rows: repeat clicks that bought again
	late                                                           atomic.Int64 // -carts: Confirms that found the hold expired
	resolved                                                       atomic.Int64 // failed calls that a later duplicate showed had bought

	mu         sync.Mutex
	firstError error
}

func (c *counts) fail(err error) {
	c.errors.Add(1)
	c.mu.Lock()
	if c.firstError == nil {
		c.firstError = err
	}
	c.mu.Unlock()
}

// runSale opens tg, puts cfg.stock units of a fresh SKU on sale and lets
// cfg.buyers buyers race for them.
func runSale(ctx context.Context, cfg *config, env *backends, tg target, stderr io.Writer) result {
	r := result{Strategy: tg.strategy, Store: tg.store, Where: tg.where, Embedded: tg.embedded, Buyers: cfg.buyers, Initial: cfg.stock}
	openCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	m, err := tg.open(openCtx)
	cancel()
	if err != nil {
		r.Failure = "setup: " + err.Error()
		return r
	}
	hooks, _ := m.(saleHooks)
	if hooks != nil {
		defer hooks.close()
	}
	var meter *saleMeter
	if cfg.metrics {
		if meter, m, err = newSaleMeter(m, tg.strategy); err != nil {
			r.Failure = "setup: " + err.Error()
			return r
		}
		defer meter.close()
	}
	if cfg.carts {
		return runCarts(ctx, cfg, env, tg, m, stderr)
	}
	sku := env.sku(tg)
	if err := m.Init(ctx, sku, cfg.stock); err != nil {
		r.Failure = "init: " + err.Error()
		return r
	}
	r.Ran = true
	var c counts
	buyers := make([]buyer, cfg.buyers)
	defer func() {
		var keys []string
		for i, b := range buyers {
			if b.bought {
				keys = append(keys, buyerKey(i))
			}
		}
		env.forget(tg, sku, keys)
	}()
	stopProgress := startProgress(cfg, stderr, tg, &c, cfg.stock, int64(cfg.buyers+cfg.repeaters()))
	saleCtx, cancel := context.WithTimeout(ctx, cfg.saleTimeout)
	stopHooks := func() {}
	if hooks != nil {
		stopHooks = hooks.during(saleCtx, &c)
	}
	elapsed := sale(saleCtx, cfg, m, sku, buyers, tg.keyless, &c)
	timedOut := saleCtx.Err() != nil && ctx.Err() == nil
	stopHooks()
	cancel()
	stopProgress()
	if hooks != nil {
		if err := hooks.after(ctx, &r); err != nil {
			r.Failure = "after the sale: " + err.Error()
			return r
		}
	}

	final, err := m.Get(ctx, sku)
	if err != nil {
		r.Failure = "reading the stock back: " + err.Error()
		return r
	}
	var lat []time.Duration
	for _, b := range buyers {
		switch {
		case tg.keyless:
			// No keys: every call that took units sold them.
			r.Sold += b.buys * cfg.qty
		case b.bought:
			// A keyed buyer buys once: units a broken strategy took for
			// a repeat click show as lost.
			r.Sold += cfg.qty
		}
		lat = append(lat, b.latencies...)
	}
	r.Left = final
	taken := r.Initial - final
	r.Oversold = max(0, max(r.Sold, taken)-r.Initial)
	r.Unknown = c.unknown.Load()
	// Without keys, a call that failed without a verdict may have taken
	// its units unseen: such units are unknown, not lost.
	r.Lost = max(taken-r.Sold-r.Unknown*cfg.qty, r.Sold-taken, 0)
	r.Requests = c.requests.Load()
	r.Insufficient, r.Contention = c.insufficient.Load(), c.contention.Load()
	r.Duplicate, r.Errors, r.Retries = c.duplicate.Load(), c.errors.Load(), c.retries.Load()
	r.Rebought = c.rebought.Load()
	if c.firstError != nil {
		r.FirstError = c.firstError.Error()
	}
	r.setTimes(elapsed, lat)
	var disagree string
	if meter != nil {
		r.Metrics = meter.read(ctx)
		disagree = r.Metrics.check(r, c.resolved.Load(), cfg.qty)
	}
	switch {
	case r.Oversold > 0:
		r.Failure = fmt.Sprintf("OVERSOLD %d units", r.Oversold)
	case timedOut:
		r.Failure = fmt.Sprintf("the sale did not finish within -sale-timeout %v", cfg.saleTimeout)
	case r.Lost > 0:
		r.Failure = fmt.Sprintf("LOST %d units: initial %d - final %d != %d sold", r.Lost, r.Initial, final, r.Sold)
	case disagree != "":
		r.Failure = "-metrics: the decorator's counters disagree with the sale's: " + disagree
	}
	r.Failure = joinFailures(r.Failure, r.errorsFailure())
	return r
}

// errorsFailure says why a row with errors (requests that failed without
// a verdict once their retries were spent) is a failure, or "" when it
// has none: a request the strategy could not answer on a sale with every
// server up is a fault of the strategy, not a figure to print.
// A tiered row whose Redis -kill-redis-at killed is the exception: its
// calls cut by the kill are the fault under test (its own checks judge it).
func (r result) errorsFailure() string {
	if r.Errors == 0 || r.Tiered != nil && r.Tiered.KilledAt >= 0 {
		return ""
	}
	return fmt.Sprintf("%d requests failed without a verdict, first: %s", r.Errors, r.FirstError)
}

// joinFailures joins the non-empty reasons of a row's failure.
func joinFailures(reasons ...string) string {
	var out []string
	for _, s := range reasons {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

// sale runs the buyers, all released together, at most cfg.concurrency calls
// in flight, and returns how long they took. keyless buyers call without an
// idempotency key.
func sale(ctx context.Context, cfg *config, m inventory.StockManager, sku string, buyers []buyer, keyless bool, c *counts) time.Duration {
	var ready, done sync.WaitGroup
	gun := make(chan struct{})
	slots := make(chan struct{}, cfg.concurrency)
	repeaters := cfg.repeaters()
	ready.Add(len(buyers))
	done.Add(len(buyers))
	for i := range buyers {
		// Spread the repeat buyers evenly: i is one when the count of
		// repeaters among the first i+1 buyers goes up.
		clicks := 1
		if (i+1)*repeaters/len(buyers) != i*repeaters/len(buyers) {
			clicks = 2
		}
		go func() {
			defer done.Done()
			ready.Done()
			<-gun
			b := &buyers[i]
			key := "" // none: the row has no idempotency keys
			if !keyless {
				key = buyerKey(i)
			}
			for range clicks {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				t0 := time.Now()
				b.click(ctx, cfg, m, sku, key, c)
				b.latencies = append(b.latencies, time.Since(t0))
				<-slots
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(gun)
	done.Wait()
	return time.Since(t0)
}

// buyerKey is buyer i's id, its idempotency key.
func buyerKey(i int) string { return fmt.Sprintf("buyer-%d", i) }

// click is one press of "buy": a Reduce with the buyer's key (none when
// keyless), made again through package retry after ErrContention or, with a
// key, an error without a verdict.
func (b *buyer) click(ctx context.Context, cfg *config, m inventory.StockManager, sku, key string, c *counts) {
	defer c.requests.Add(1)
	attempts := 0
	_, err := retry.Do(ctx, key, func(ctx context.Context, opts ...inventory.Option) (int64, error) {
		if attempts++; attempts > 1 {
			c.retries.Add(1)
		}
		callCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
		rem, err := m.Reduce(callCtx, sku, cfg.qty, opts...)
		if err != nil && retry.Retryable(err, true) && !errors.Is(err, inventory.ErrContention) {
			b.ambiguous = true // it may have taken effect
		}
		return rem, err
	}, cfg.retryOptions()...)
	switch {
	case err == nil:
		if b.bought {
			c.rebought.Add(1)
		}
		b.bought = true
		b.buys++
		c.sold.Add(cfg.qty)
	case errors.Is(err, inventory.ErrDuplicate):
		if !b.bought && b.ambiguous {
			// A failed call did take effect: the key says so.
			b.bought = true
			c.sold.Add(cfg.qty)
			c.resolved.Add(1)
			return
		}
		c.duplicate.Add(1)
	case errors.Is(err, inventory.ErrInsufficientStock):
		c.insufficient.Add(1)
	case errors.Is(err, inventory.ErrContention) && ctx.Err() == nil:
		c.contention.Add(1) // gave up after -retries
	case key == "" && retry.Retryable(err, true) && !errors.Is(err, inventory.ErrContention):
		// Without a key a retry could take units twice.
		c.unknown.Add(1)
		c.fail(err)
	default:
		c.fail(err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// percentile returns the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(i, 0)]
}

// setTimes records how long the sale of r.Requests calls took and the
// percentiles of their latencies lat, which it sorts.
func (r *result) setTimes(elapsed time.Duration, lat []time.Duration) {
	r.ElapsedMS = ms(elapsed)
	r.Throughput = float64(r.Requests) / elapsed.Seconds()
	slices.Sort(lat)
	r.P50MS, r.P90MS, r.P99MS = ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99))
	if len(lat) > 0 {
		r.MaxMS = ms(lat[len(lat)-1])
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// startProgress shows, when cfg.progress is set, how far the sale of tg has
// got on stderr until the returned function is called: requests answered
// (of total),
// units sold of stock, the rate so far and the time left at that rate.
func startProgress(cfg *config, stderr io.Writer, tg target, c *counts, stock, total int64) (stop func()) {
	if !cfg.progress {
		return func() {}
	}
	// On a terminal the line is redrawn in place; elsewhere a line a second.
	every, end, pad := time.Second, "\n", ""
	if isTerminal(stderr) {
		every, end, pad = 100*time.Millisecond, "\r", "    " // pad: clear what a longer line left
	}
	t0 := time.Now()
	show := func() {
		done := c.requests.Load()
		elapsed := time.Since(t0)
		rate := float64(done) / elapsed.Seconds()
		eta := "ETA -"
		switch {
		case done >= total:
			eta = fmt.Sprintf("done in %s", elapsed.Round(time.Millisecond))
		case rate > 0:
			eta = "ETA " + (time.Duration(float64(total-done) / rate * float64(time.Second))).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(stderr, "%-28s %6d/%d requests, sold %d/%d, %.0f req/s, %s, %d sold out, %d retries%s",
			tg.strategy+"/"+tg.store, done, total, c.sold.Load(), stock, rate, eta, c.insufficient.Load(), c.retries.Load(), pad+end)
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				show()
			case <-quit:
				show()
				if end == "\r" {
					fmt.Fprintln(stderr)
				}
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}
