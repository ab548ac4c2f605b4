//go:build drills

package drills

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/lateness"
)

// Sale parameters: far more stock than a drill sells, so that a unit the
// deployment forgot shows as oversold (and a replayed key can take effect
// again) instead of hiding behind a sold-out refusal.
const (
	initialStock = 1_000_000
	workers      = 16
	callDeadline = time.Second
	warmup       = 700 * time.Millisecond
	// cleanFor is how long calls must succeed without a failure, after the
	// event, before the sale stops.
	cleanFor = time.Second
	// saleCap ends the sale this long after the strike whatever happens.
	saleCap = 40 * time.Second
	// verdictCap is how long a buyer retries one call before it counts
	// as never settled: longer than lockmgr's bound for a lines call cut
	// midway (lockmgr.AbandonGrace after its record was made, which its
	// retry then takes over; Sweep looks once its hold's minute is over),
	// after which its key is free again.
	verdictCap = 150 * time.Second
	// holdsCap is how long the settled deployment may keep units held
	// (a cart cut midway leaves parts that expire: luascript.LinesTTL).
	holdsCap = 20 * time.Second
)

// drill is one strategy's run through one event.
type drill struct {
	name, strategy, options string
	m                       inventory.StockManager
	// hot is the SKU every buyer buys; other is the cart's second SKU,
	// in another Cluster slot: with other set, every third buyer buys
	// hot and other in one keyed ReduceLines (m must be an OrderManager).
	hot, other string
	// strike injects the event. It returns once the event is over (a
	// process killed, a switch asked for, a reshard done, a stopped
	// server resumed); the sale goes on meanwhile.
	strike func(ctx context.Context) error
	// settle waits, after the sale, until the deployment is whole again
	// (the killed process restarted and caught up).
	settle func(ctx context.Context) error
	// replicas: the strategy waits for a replica (WithReplicas); the
	// targets are then 0 oversold and 0 keys applied twice.
	replicas bool
	// probe counts double holders (zklock), or is nil.
	probe *holders
}

// attempt is one call's attempt.
type attempt struct {
	start, end time.Time
	first      bool // a call's first attempt, not a retry
	err        error
	own        time.Duration // past the deadline, net of the scheduler's delay
}

// buy is one keyed buyer's call: its lines (one line: a Reduce).
type buy struct {
	key   string
	lines []inventory.Line
}

type sale struct {
	d  drill
	om inventory.OrderManager

	lastFail atomic.Int64 // unix nanos of the latest failed attempt's end
	lastOK   atomic.Int64 // unix nanos of the latest successful attempt's start
	negative atomic.Int64 // successful Reduces that returned a negative remaining

	mu       sync.Mutex
	attempts []attempt
	took     []buy            // calls that took effect
	sold     map[string]int64 // units per SKU of calls that took effect
	errs     map[string]int   // failed attempts by error text, for the log
	bad      []string         // errors the contract does not allow here
	longest  time.Duration    // the longest a call waited for its verdict
}

// call makes one attempt of b under a 1s deadline, measured by lateness.
func (s *sale) call(b buy, first bool) error {
	start := time.Now()
	late, sched, err := lateness.Late(callDeadline, func(ctx context.Context) error {
		if len(b.lines) == 1 {
			rem, err := s.d.m.Reduce(ctx, b.lines[0].SKU, b.lines[0].Qty, inventory.WithKey(b.key))
			if err == nil && rem < 0 {
				s.negative.Add(1)
			}
			return err
		}
		return s.om.ReduceLines(ctx, b.lines, inventory.WithKey(b.key))
	})
	if err == nil {
		s.lastOK.Store(start.UnixNano())
	}
	s.mu.Lock()
	s.attempts = append(s.attempts, attempt{start, time.Now(), first, err, late - sched})
	s.mu.Unlock()
	return err
}

// verdict reports whether err ends a call: took says it took effect.
func verdict(err error, retry bool) (took, done bool, bad error) {
	switch {
	case err == nil:
		return true, true, nil
	case errors.Is(err, inventory.ErrDuplicate):
		if !retry {
			return true, true, fmt.Errorf("first attempt said duplicate: %w", err)
		}
		return true, true, nil
	case errors.Is(err, inventory.ErrInsufficientStock):
		return false, true, fmt.Errorf("refused with far more stock than sold: %w", err)
	case errors.Is(err, inventory.ErrNotFound), errors.Is(err, inventory.ErrInvalidArgument):
		return false, true, err
	}
	return false, false, nil // no verdict: retry with the key
}

// settle retries b with its key until it has a verdict, verdictCap at most.
func (s *sale) settle(b buy) (took bool) {
	first := time.Now()
	pause := 20 * time.Millisecond
	for retry := false; ; retry = true {
		err := s.call(b, !retry)
		took, done, bad := verdict(err, retry)
		if bad != nil {
			s.mu.Lock()
			s.bad = append(s.bad, fmt.Sprintf("%s: %v", b.key, bad))
			s.mu.Unlock()
		}
		if done {
			s.mu.Lock()
			s.longest = max(s.longest, time.Since(first))
			s.mu.Unlock()
			return took
		}
		s.lastFail.Store(time.Now().UnixNano())
		s.mu.Lock()
		s.errs[errText(err)]++
		s.mu.Unlock()
		if time.Since(first) > verdictCap {
			s.mu.Lock()
			s.bad = append(s.bad, fmt.Sprintf("%s: no verdict after %v: %v", b.key, verdictCap, err))
			s.mu.Unlock()
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Second)
	}
}

// errText shortens an error for the log: its text without digits (ports,
// offsets, slots and keys vary).
func errText(err error) string {
	s := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, err.Error())
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// runDrill runs d's sale, strikes, settles, checks and records its row.
func runDrill(t *testing.T, d drill) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := &sale{d: d, errs: map[string]int{}, sold: map[string]int64{}}
	skus := []string{d.hot}
	if d.other != "" {
		om, ok := d.m.(inventory.OrderManager)
		if !ok {
			t.Fatalf("%s: carts need an OrderManager", d.strategy)
		}
		s.om = om
		skus = append(skus, d.other)
	}
	for _, sku := range skus {
		if err := eventually(ctx, func(ctx context.Context) error { return d.m.Init(ctx, sku, initialStock) }); err != nil {
			t.Fatalf("init %s: %v", sku, err)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	if s.om != nil {
		// The opt-in background reaper a service runs beside its order
		// calls: holds nobody touches again come back through it.
		rctx, stopReaper := context.WithCancel(ctx)
		var reaper sync.WaitGroup
		reaper.Go(func() { _ = inventory.Reap(rctx, s.om, time.Second, nil) })
		defer func() {
			stopReaper()
			reaper.Wait()
		}()
	}
	for w := range workers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				b := buy{key: fmt.Sprintf("%s/w%d/%d", t.Name(), w, n), lines: []inventory.Line{{SKU: d.hot, Qty: 1}}}
				if s.om != nil && n%3 == 2 {
					b.lines = append(b.lines, inventory.Line{SKU: d.other, Qty: 1})
				}
				if s.settle(b) {
					s.mu.Lock()
					s.took = append(s.took, b)
					for _, l := range b.lines {
						s.sold[l.SKU] += l.Qty
					}
					s.mu.Unlock()
				}
			}
		})
	}
	time.Sleep(warmup)
	struck := time.Now()
	strikeErr := d.strike(ctx)
	over := time.Now()
	t.Logf("%s: the event took %v (err %v)", d.name, over.Sub(struck).Round(time.Millisecond), strikeErr)
	// Sell on until calls have succeeded, and none failed, for cleanFor.
	for time.Since(over) < saleCap {
		lastFail := time.Unix(0, s.lastFail.Load())
		if time.Since(lastFail) >= cleanFor && time.Since(over) >= cleanFor && s.lastOK.Load() > lastFail.UnixNano() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	saleEnd := time.Now()
	if strikeErr != nil {
		t.Errorf("the event failed: %v", strikeErr)
	}

	// Log what the deployment waits for, each time it changes.
	var waited string
	if err := eventually(ctx, func(ctx context.Context) error {
		err := d.settle(ctx)
		if err != nil && errText(err) != waited {
			waited = errText(err)
			t.Logf("%v after the sale: %v", time.Since(saleEnd).Round(time.Millisecond), err)
		}
		return err
	}); err != nil {
		t.Fatalf("the deployment never settled: %v", err)
	}
	t.Logf("settled %v after the sale", time.Since(saleEnd).Round(time.Millisecond))

	r := row{drill: d.name, strategy: d.strategy, options: d.options, doubles: -1}
	var missed []string
	miss := func(format string, args ...any) {
		missed = append(missed, fmt.Sprintf(format, args...))
		t.Errorf(format, args...)
	}

	// Held units: a cart cut midway leaves parts that expire and come back.
	var held map[string]int64
	if s.om != nil {
		deadline := time.Now().Add(holdsCap)
		for {
			held = map[string]int64{}
			err := eventually(ctx, func(ctx context.Context) error {
				if _, err := s.om.Sweep(ctx); err != nil {
					return err
				}
				for _, sku := range skus {
					n, err := s.om.Held(ctx, sku)
					if err != nil {
						return err
					}
					if n != 0 {
						held[sku] = n
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("held: %v", err)
			}
			if len(held) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if len(held) > 0 {
			miss("units still held %v after the deployment settled: a hold that never comes back", held)
		}
	}

	// Stock read back, and the per-SKU invariant (units still held, reported
	// above, are neither sold nor lost).
	for _, sku := range skus {
		var final int64
		err := eventually(ctx, func(ctx context.Context) error {
			var err error
			final, err = d.m.Get(ctx, sku)
			return err
		})
		if err != nil {
			t.Fatalf("get %s: %v", sku, err)
		}
		diff := s.sold[sku] + held[sku] - (initialStock - final)
		t.Logf("%s: sold %d, held %d, initial %d - final %d = %d", sku, s.sold[sku], held[sku], int64(initialStock), final, initialStock-final)
		r.sold += s.sold[sku]
		if diff > 0 {
			r.oversold += diff
		} else {
			r.lost -= diff
		}
	}

	// Keys applied twice: every key that took effect, sent again.
	r.twice = s.replay(ctx)

	r.failed, r.recovery, r.late = s.summary(struck)
	r.longest = s.longest
	if d.probe != nil {
		r.doubles = d.probe.doubles.Load()
	}
	r.load = loadavg()
	t.Logf("%s %s %s: sold %d, oversold %d, lost %d, keys applied twice %d, calls failed %d, back after %v, longest wait for a verdict %v, late %v, load %s",
		d.name, d.strategy, d.options, r.sold, r.oversold, r.lost, r.twice, r.failed, r.recovery, r.longest, r.late, r.load)
	for _, e := range slices.Sorted(maps.Keys(s.errs)) {
		t.Logf("  %5d x %s", s.errs[e], e)
	}

	// Targets.
	if n := s.negative.Load(); n > 0 {
		miss("%d calls returned a negative remaining stock", n)
	}
	if len(s.bad) > 0 {
		miss("%d calls ended with an error the contract does not allow here, first: %s", len(s.bad), s.bad[0])
	}
	if r.lost > 0 {
		miss("%d units lost", r.lost)
	}
	if own := r.late; own > inventory.DeadlineSlack {
		miss("a call returned %v past its deadline beyond the scheduler's delay (DeadlineSlack %v)", own.Round(time.Millisecond), inventory.DeadlineSlack)
	}
	switch {
	case d.replicas || d.probe != nil:
		if r.oversold > 0 {
			miss("%d oversold", r.oversold)
		}
		if r.twice > 0 {
			miss("%d keys applied twice", r.twice)
		}
	case r.oversold > r.twice:
		miss("%d oversold, more than the %d acknowledged keys the promoted replica lacked", r.oversold, r.twice)
	}
	if r.doubles > 0 {
		miss("%d double holders", r.doubles)
	}
	r.missed = missed
	record(r)
}

// replay sends every call that took effect again with its key, each until
// it has a verdict, and returns how many took effect again (anything but
// ErrDuplicate).
func (s *sale) replay(ctx context.Context) int64 {
	var twice atomic.Int64
	work := make(chan buy)
	var wg sync.WaitGroup
	for range 2 * workers {
		wg.Go(func() {
			for b := range work {
				for {
					err := s.replayOnce(b)
					if errors.Is(err, inventory.ErrDuplicate) || ctx.Err() != nil {
						break
					}
					if _, done, _ := verdict(err, true); done {
						twice.Add(1)
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	for _, b := range s.took {
		work <- b
	}
	close(work)
	wg.Wait()
	return twice.Load()
}

func (s *sale) replayOnce(b buy) error {
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	if len(b.lines) == 1 {
		_, err := s.d.m.Reduce(ctx, b.lines[0].SKU, b.lines[0].Qty, inventory.WithKey(b.key))
		return err
	}
	return s.om.ReduceLines(ctx, b.lines, inventory.WithKey(b.key))
}

// summary returns the failed attempts, the time from the strike to the
// start of the first successful attempt after the last failed first
// attempt began (the retries of a call the event cut may go on failing
// while new calls succeed: a cart's busy id), and the most an attempt ran
// past its deadline beyond the scheduler.
func (s *sale) summary(struck time.Time) (failed int64, recovery, late time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lastFail time.Time
	for _, a := range s.attempts {
		late = max(late, a.own)
		if a.err != nil && !errors.Is(a.err, inventory.ErrDuplicate) {
			failed++
			if a.first && a.start.After(lastFail) {
				lastFail = a.start
			}
		}
	}
	if failed == 0 {
		return 0, 0, late
	}
	var back time.Time
	for _, a := range s.attempts {
		if a.err == nil && a.start.After(lastFail) && (back.IsZero() || a.start.Before(back)) {
			back = a.start
		}
	}
	if back.IsZero() {
		return failed, -1, late
	}
	return failed, back.Sub(struck), late
}

// eventually calls f with a fresh 2s context until it returns nil, for up
// to a minute or until ctx ends.
func eventually(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return faulttest.Eventually(ctx, func() error {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		return f(cctx)
	})
}
