package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/retry"
)

// cartResult is what the cart sale (-carts) adds to a row. The row's own
// measures then count over every SKU: initial, sold and left are units of
// all SKUs together, insufficient counts carts refused, requests every
// Reserve, Confirm and ReduceLines answered.
type cartResult struct {
	SKUs int `json:"skus"`
	// Held is the units in holds when the buying ended (Held, summed over
	// the SKUs), read with the reaper stopped and no call in flight.
	Held int64 `json:"held"`
	// Expired is the units of holds never confirmed (the abandoned carts,
	// and those whose Confirm found the hold expired): each of them came
	// back to the available stock, or the check fails.
	Expired int64 `json:"expired"`
	// Abandoned is the holds taken by buyers who never pay; Late the
	// payers whose Confirm found their hold expired (ErrHoldReleased).
	Abandoned int64 `json:"abandoned"`
	Late      int64 `json:"late"`
	// HeldAfter is Held once the holds' TTL has passed: 0, or the check
	// fails.
	HeldAfter int64 `json:"held_after"`
	// ReleaseMS is how long after the buying ended every hold was
	// released (HeldAfter 0 on every SKU).
	ReleaseMS float64 `json:"release_ms"`
	// Released counts the holds the reaper's Sweeps released (others are
	// released lazily by the calls that move their SKUs).
	Released int64 `json:"released"`
	// Check is "ok" when every SKU kept initial - available == sold -
	// returned + held both when the buying ended and after expiry (with
	// held 0), or says where it did not.
	Check string `json:"check"`
	// PerSKU is each SKU's stock after expiry.
	PerSKU []skuCheck `json:"per_sku"`
}

// skuCheck is one SKU's figures after expiry. This sale makes no Return,
// so returned is 0 and the invariant reads initial - available == sold.
type skuCheck struct {
	SKU       string `json:"sku"`
	Initial   int64  `json:"initial"`
	Available int64  `json:"available"`
	Sold      int64  `json:"sold"`
	Returned  int64  `json:"returned"`
	Held      int64  `json:"held"`
}

// role is what a cart buyer does.
type role int

const (
	payer   role = iota // Reserve, then Confirm
	abandon             // Reserve and never pay
	direct              // ReduceLines, no hold
)

// outcome is where a cart ended.
type outcome int

const (
	refused outcome = iota // nothing taken: sold out, or gave up
	sold                   // the units are sold
	expired                // the units were held and never sold: they come back
	unknown                // a call failed without a verdict: resolved after the sale
)

// cart is one cart buyer.
type cart struct {
	id        string // hold id and idempotency key
	role      role
	lines     []inventory.Line
	outcome   outcome
	latencies []time.Duration
}

// carts deals the buyers their roles and lines: cfg.abandon and cfg.direct
// of them abandon and buy directly, in an order and with carts drawn from a
// seeded generator, so that a run is repeatable.
func carts(cfg *config, skus []string, idPrefix string) []cart {
	rng := rand.New(rand.NewPCG(uint64(cfg.buyers), uint64(len(skus))))
	cs := make([]cart, cfg.buyers)
	nAbandon := int(cfg.abandon*float64(cfg.buyers) + 0.5)
	nDirect := min(int(cfg.direct*float64(cfg.buyers)+0.5), cfg.buyers-nAbandon)
	for i := range cs {
		c := &cs[i]
		c.id = fmt.Sprintf("%s-%d", idPrefix, i)
		switch {
		case i < nAbandon:
			c.role = abandon
		case i < nAbandon+nDirect:
			c.role = direct
		}
		n := 1 + rng.IntN(min(5, len(skus)))
		for _, j := range rng.Perm(len(skus))[:n] {
			c.lines = append(c.lines, inventory.Line{SKU: skus[j], Qty: 1 + rng.Int64N(cfg.qty)})
		}
	}
	rng.Shuffle(len(cs), func(i, j int) { cs[i].role, cs[j].role = cs[j].role, cs[i].role })
	return cs
}

// runCarts is runSale for -carts: it puts cfg.stock units of each of
// cfg.skus fresh SKUs on sale, lets the cart buyers race for them with a
// reaper running, then checks every SKU's stock when the buying ends and
// again once the holds have expired.
func runCarts(ctx context.Context, cfg *config, env *backends, tg target, m inventory.StockManager, stderr io.Writer) result {
	r := result{Strategy: tg.strategy, Store: tg.store, Where: tg.where, Embedded: tg.embedded, Buyers: cfg.buyers,
		Initial: cfg.stock * int64(cfg.skus)}
	om, ok := m.(inventory.OrderManager)
	if !ok {
		r.Skipped = "it does not implement inventory.OrderManager"
		return r
	}
	tag := env.tag(tg)
	skus := make([]string, cfg.skus)
	for i := range skus {
		skus[i] = fmt.Sprintf("flashsale-%s-%d", tag, i)
	}
	buyers := carts(cfg, skus, "cart-"+tag)
	defer env.forgetCarts(tg, tag, skus)
	for _, sku := range skus {
		if err := m.Init(ctx, sku, cfg.stock); err != nil {
			r.Failure = "init: " + err.Error()
			return r
		}
	}
	// One hold on a SKU of its own shows whether the backend runs the
	// order calls at all before the sale counts on them.
	if err := probeOrders(ctx, cfg, m, om, tag); err != nil {
		if tg.embedded {
			r.Skipped = "the order calls fail on this embedded server: " + err.Error()
		} else {
			r.Failure = "the order calls fail: " + err.Error()
		}
		return r
	}
	r.Ran = true
	cr := &cartResult{SKUs: cfg.skus}
	r.Carts = cr

	var c counts
	var released atomic.Int64
	var reapErrs reapErrors
	stopReap := startReaper(ctx, cfg, om, &released, &reapErrs)
	calls := int64(0)
	for _, b := range buyers {
		calls += map[role]int64{payer: 2, abandon: 1, direct: 1}[b.role]
	}
	stopProgress := startProgress(cfg, stderr, tg, &c, r.Initial, calls)
	saleCtx, cancel := context.WithTimeout(ctx, cfg.saleTimeout)
	elapsed := cartSale(saleCtx, cfg, om, buyers, &c)
	timedOut := saleCtx.Err() != nil && ctx.Err() == nil
	cancel()
	stopProgress()
	stopReap()
	resolve(ctx, cfg, om, buyers, &c)
	ended := time.Now()

	// The buying has ended and the reaper is stopped: nothing moves.
	perSKU := func(b []cart) map[string]int64 {
		s := map[string]int64{}
		for _, c := range b {
			if c.outcome == sold {
				for _, l := range c.lines {
					s[l.SKU] += l.Qty
				}
			}
		}
		return s
	}
	soldBy := perSKU(buyers)
	var problems []string
	read := func(when string) (avail, held map[string]int64) {
		avail, held = map[string]int64{}, map[string]int64{}
		for _, sku := range skus {
			a, err := m.Get(ctx, sku)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: reading %s: %v", when, sku, err))
				continue
			}
			h, err := om.Held(ctx, sku)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: reading the held units of %s: %v", when, sku, err))
				continue
			}
			avail[sku], held[sku] = a, h
			if taken := cfg.stock - a; taken != soldBy[sku]+h || a < 0 {
				problems = append(problems, fmt.Sprintf("%s: %s: initial %d - available %d = %d, but sold %d - returned 0 + held %d = %d",
					when, sku, cfg.stock, a, taken, soldBy[sku], h, soldBy[sku]+h))
			}
		}
		return avail, held
	}
	unresolved := 0
	for _, b := range buyers {
		if b.outcome == unknown {
			unresolved++
		}
	}
	if unresolved == 0 {
		_, held := read("when the buying ended")
		for _, h := range held {
			cr.Held += h
		}
	} else {
		problems = append(problems, fmt.Sprintf("%d carts' outcome stayed unknown after a last try: the stock cannot be checked", unresolved))
	}

	// Let every hold expire, with the reaper running again: each is
	// released at most one reap period (plus a Sweep) after its TTL, or
	// after its TTL and the lock strategies' abandon grace when its
	// Reserve failed midway.
	stopReap = startReaper(ctx, cfg, om, &released, &reapErrs)
	wait := cfg.holdTTL + tg.grace + 10*cfg.reap + 5*time.Second
	deadline := ended.Add(wait)
	for {
		total := int64(0)
		for _, sku := range skus {
			h, err := om.Held(ctx, sku)
			if err != nil {
				total = -1
				break
			}
			total += h
		}
		if total == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, cfg.reap)
	}
	cr.ReleaseMS = ms(time.Since(ended))
	stopReap()
	cr.Released = released.Load()
	avail, held := read("after the holds expired")
	for _, sku := range skus {
		a, s, h := avail[sku], soldBy[sku], held[sku]
		cr.PerSKU = append(cr.PerSKU, skuCheck{SKU: sku, Initial: cfg.stock, Available: a, Sold: s, Held: h})
		cr.HeldAfter += h
		r.Left += a
		r.Sold += s
		r.Oversold += max(0, s-cfg.stock, -a)
		if h == 0 {
			r.Lost += max(cfg.stock-a-s, s-(cfg.stock-a))
		}
		if h != 0 {
			problems = append(problems, fmt.Sprintf("%s: %d units still held %v after the buying ended (hold TTL %v)", sku, h, wait, cfg.holdTTL))
		}
	}
	if unresolved > 0 {
		r.Lost = 0 // not known
	}

	var lat []time.Duration
	for _, b := range buyers {
		lat = append(lat, b.latencies...)
		switch {
		case b.outcome == expired:
			for _, l := range b.lines {
				cr.Expired += l.Qty
			}
			if b.role == abandon {
				cr.Abandoned++
			}
		}
	}
	cr.Late = c.late.Load()
	r.Requests = c.requests.Load()
	r.Insufficient, r.Contention = c.insufficient.Load(), c.contention.Load()
	r.Duplicate, r.Errors, r.Retries = c.duplicate.Load(), c.errors.Load(), c.retries.Load()
	if c.firstError != nil {
		r.FirstError = c.firstError.Error()
	}
	var sweepFailure string
	if n, err := reapErrs.get(); n > 0 {
		sweepFailure = fmt.Sprintf("%d Sweeps failed, first: %v", n, err)
		if r.FirstError == "" {
			r.FirstError = sweepFailure
		}
	}
	r.setTimes(elapsed, lat)
	cr.Check = "ok"
	if len(problems) > 0 {
		cr.Check = "FAIL"
	}
	switch {
	case r.Oversold > 0:
		r.Failure = fmt.Sprintf("OVERSOLD %d units", r.Oversold)
	case timedOut:
		r.Failure = fmt.Sprintf("the sale did not finish within -sale-timeout %v", cfg.saleTimeout)
	case r.Lost > 0:
		r.Failure = fmt.Sprintf("LOST %d units", r.Lost)
	}
	if len(problems) > 0 {
		if r.Failure != "" {
			problems = append([]string{r.Failure}, problems...)
		}
		r.Failure = strings.Join(problems, "; ")
	}
	r.Failure = joinFailures(r.Failure, r.errorsFailure(), sweepFailure)
	return r
}

// probeOrders reserves and cancels one unit of a SKU of its own, and
// deletes nothing: forgetCarts does.
func probeOrders(ctx context.Context, cfg *config, m inventory.StockManager, om inventory.OrderManager, tag string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	sku, id := "flashsale-"+tag+"-probe", "probe-"+tag
	if err := m.Init(ctx, sku, 1); err != nil {
		return err
	}
	if err := om.Reserve(ctx, id, []inventory.Line{{SKU: sku, Qty: 1}}, time.Minute); err != nil {
		return fmt.Errorf("a probe Reserve: %w", err)
	}
	if h, err := om.Held(ctx, sku); err != nil || h != 1 {
		return fmt.Errorf("held after a probe Reserve of 1: %d, %v", h, err)
	}
	if err := om.Cancel(ctx, id); err != nil {
		return fmt.Errorf("a probe Cancel: %w", err)
	}
	if _, err := om.Sweep(ctx); err != nil {
		return fmt.Errorf("a probe Sweep: %w", err)
	}
	return nil
}

// reapErrors counts the reaper's failed Sweeps.
type reapErrors struct {
	mu    sync.Mutex
	n     int
	first error
}

func (e *reapErrors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n++; e.first == nil {
		e.first = err
	}
}

func (e *reapErrors) get() (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.first
}

// countingSweeper counts what the reaper's Sweeps release.
type countingSweeper struct {
	om       inventory.OrderManager
	released *atomic.Int64
}

func (s countingSweeper) Sweep(ctx context.Context) (int, error) {
	n, err := s.om.Sweep(ctx)
	s.released.Add(int64(n))
	return n, err
}

// startReaper runs inventory.Reap every cfg.reap until stop is called;
// stop returns once the reaper has.
func startReaper(ctx context.Context, cfg *config, om inventory.OrderManager, released *atomic.Int64, errs *reapErrors) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = inventory.Reap(ctx, countingSweeper{om, released}, cfg.reap, errs.add)
	}()
	return func() { cancel(); <-done }
}

// cartSale runs the cart buyers, all released together, at most
// cfg.concurrency calls in flight, and returns how long they took.
func cartSale(ctx context.Context, cfg *config, om inventory.OrderManager, buyers []cart, c *counts) time.Duration {
	var ready, done sync.WaitGroup
	gun := make(chan struct{})
	slots := make(chan struct{}, cfg.concurrency)
	ready.Add(len(buyers))
	done.Add(len(buyers))
	for i := range buyers {
		go func() {
			defer done.Done()
			ready.Done()
			<-gun
			buyers[i].shop(ctx, cfg, om, slots, c)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(gun)
	done.Wait()
	return time.Since(t0)
}

// shop is one cart buyer's visit: each call takes a slot, and each retry is
// part of its request.
func (b *cart) shop(ctx context.Context, cfg *config, om inventory.OrderManager, slots chan struct{}, c *counts) {
	call := func(f func(context.Context, ...inventory.Option) error) (error, bool) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err(), false
		}
		defer func() { <-slots }()
		t0 := time.Now()
		err, ambiguous := attempt(ctx, cfg, c, b.id, f)
		b.latencies = append(b.latencies, time.Since(t0))
		c.requests.Add(1)
		return err, ambiguous
	}
	units := int64(0)
	for _, l := range b.lines {
		units += l.Qty
	}
	if b.role == direct {
		err, ambiguous := call(func(ctx context.Context, opts ...inventory.Option) error {
			return om.ReduceLines(ctx, b.lines, opts...) // opts: the key b.id
		})
		b.outcome = b.verdict(err, ambiguous, c, sold)
		if b.outcome == sold {
			c.sold.Add(units)
		}
		return
	}
	// Reserve and Confirm take no options: the hold id b.id is their key.
	err, ambiguous := call(func(ctx context.Context, _ ...inventory.Option) error {
		return om.Reserve(ctx, b.id, b.lines, cfg.holdTTL)
	})
	if b.outcome = b.verdict(err, ambiguous, c, expired); b.outcome != expired || b.role == abandon {
		// An abandoned hold is never confirmed: its units come back.
		// Nor is one whose Reserve left no verdict; whether it held
		// anything is unknown, so it is not counted as expired (the
		// stock check covers it either way).
		if b.outcome == unknown {
			b.outcome = refused
		}
		return
	}
	reserved := "nil"
	if err != nil {
		reserved = fmt.Sprintf("%v after an attempt without a verdict", err)
	}
	err, ambiguous = call(func(ctx context.Context, _ ...inventory.Option) error { return om.Confirm(ctx, b.id) })
	b.outcome = b.confirmed(err, ambiguous, c, reserved)
	if b.outcome == sold {
		c.sold.Add(units)
	}
}

// verdict says where a ReduceLines (ok: sold) or a Reserve (ok: expired,
// until Confirm says otherwise) left the cart.
func (b *cart) verdict(err error, ambiguous bool, c *counts, ok outcome) outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, inventory.ErrDuplicate) && ambiguous:
		return ok // an earlier attempt took effect: the key says so
	case errors.Is(err, inventory.ErrInsufficientStock):
		c.insufficient.Add(1)
		return refused
	case errors.Is(err, inventory.ErrContention):
		c.contention.Add(1)
		return refused
	}
	c.fail(err)
	if errors.Is(err, inventory.ErrDuplicate) || errors.Is(err, inventory.ErrNotFound) || errors.Is(err, inventory.ErrInvalidArgument) {
		return refused
	}
	return unknown
}

// confirmed says where a Confirm left a held cart; reserved is what its
// Reserve answered, for the error message.
func (b *cart) confirmed(err error, ambiguous bool, c *counts, reserved string) outcome {
	switch {
	case err == nil:
		return sold
	case errors.Is(err, inventory.ErrDuplicate) && ambiguous:
		return sold
	case errors.Is(err, inventory.ErrHoldReleased):
		c.late.Add(1)
		return expired
	case errors.Is(err, inventory.ErrContention):
		c.contention.Add(1)
		return expired // the hold stays, unpaid, until it expires
	}
	c.fail(fmt.Errorf("%w (its Reserve answered %s)", err, reserved))
	if errors.Is(err, inventory.ErrDuplicate) || errors.Is(err, inventory.ErrNotFound) || errors.Is(err, inventory.ErrInvalidArgument) {
		return expired
	}
	return unknown
}

// resolve makes one last try of each call that failed without a verdict,
// with the same id or key, so that its outcome is known: a repeat of a call
// that took effect is ErrDuplicate, and a Confirm of a hold that expired
// meanwhile is ErrHoldReleased.
func resolve(ctx context.Context, cfg *config, om inventory.OrderManager, buyers []cart, c *counts) {
	for i := range buyers {
		b := &buyers[i]
		if b.outcome != unknown {
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
		var err error
		if b.role == direct {
			err = om.ReduceLines(callCtx, b.lines, inventory.WithKey(b.id))
		} else {
			err = om.Confirm(callCtx, b.id)
		}
		cancel()
		switch {
		case err == nil, errors.Is(err, inventory.ErrDuplicate):
			b.outcome = sold
		case errors.Is(err, inventory.ErrHoldReleased), errors.Is(err, inventory.ErrNotFound) && b.role != direct:
			b.outcome = expired
		case errors.Is(err, inventory.ErrInsufficientStock):
			b.outcome = refused
		}
	}
}

// attempt runs f with key through package retry: again after
// ErrContention or an error without a verdict, up to cfg.retries times. It
// returns f's last error, and whether an attempt failed without a verdict
// (so that an ErrDuplicate after it means that attempt took effect).
func attempt(ctx context.Context, cfg *config, c *counts, key string, f func(context.Context, ...inventory.Option) error) (err error, ambiguous bool) {
	attempts := 0
	err = retry.Run(ctx, key, func(ctx context.Context, opts ...inventory.Option) error {
		if attempts++; attempts > 1 {
			c.retries.Add(1)
		}
		callCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
		err := f(callCtx, opts...)
		if retry.Retryable(err, true) && !errors.Is(err, inventory.ErrContention) {
			ambiguous = true
		}
		return err
	}, cfg.retryOptions()...)
	return err, ambiguous
}
