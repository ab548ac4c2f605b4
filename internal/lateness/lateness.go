// Package lateness measures how late a call returns past its ctx deadline,
// net of the scheduler's own delay, for the deadline checks of the tests
// and of the public conformance suites. It imports nothing but the
// standard library and the root package, so that a suite importing it
// stays lean.
package lateness

import (
	"context"
	"sync"
	"testing"
	"time"

	inventory "github.com/stockkit/inventory"
)

// Late runs call with a context whose deadline is d from now and reports how
// long after that deadline call returned (zero or negative when it returned in
// time), beside the scheduler's own delay over the same span: the longest of
// how late a bare timer set for the deadline fired, how late a goroutine
// waiting on the very context given to call saw it end, and how long, between
// the deadline and call's return, a watcher goroutine that wakes every
// millisecond was kept from running (the process descheduled by the OS, a
// long run queue, a stop-the-world pause). The difference is the library's
// own lateness.
//
// A bare timer alone is one sample of the scheduler, on one P: on a loaded
// machine the context's own timer (another P's, and delivered through a
// goroutine of its own) or the goroutine that returns from call may be held
// up later, or longer, and a call then looked late that was not. A call that
// is late by itself (it waits for something past ctx's end while the probes
// and the watcher run on time) is still counted late.
func Late(d time.Duration, call func(ctx context.Context) error) (late, sched time.Duration, err error) {
	stop := watch.start()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var timerLate, doneLate time.Duration
	var wg sync.WaitGroup
	early := make(chan struct{}) // closed when call returned before the deadline
	wg.Go(func() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		select {
		case <-timer.C:
			timerLate = time.Since(deadline)
		case <-early:
		}
	})
	wg.Go(func() {
		select {
		case <-ctx.Done(): // ends at the deadline: cancel runs after wg.Wait
			doneLate = time.Since(deadline)
		case <-early:
		}
	})
	err = call(ctx)
	returned := time.Now()
	if returned.Before(deadline) {
		// In time: the probes have nothing to measure, and waiting for them
		// would make every call last its whole deadline.
		close(early)
		wg.Wait()
		return returned.Sub(deadline), 0, err
	}
	wg.Wait()
	watch.wake() // a stall that spans returned is recorded once the watcher runs again
	return returned.Sub(deadline), max(timerLate, doneLate, watch.stalled(deadline, returned), 0), err
}

// CheckLate runs call as Late does and fails t when it returned more than
// inventory.DeadlineSlack past its deadline, beyond the scheduler's own
// delay measured beside it. It returns call's error, and the lateness
// attributable to the library for the test's report.
func CheckLate(t testing.TB, what string, d time.Duration, call func(ctx context.Context) error) (time.Duration, error) {
	t.Helper()
	late, sched, err := Late(d, call)
	own := late - sched
	if own > inventory.DeadlineSlack {
		t.Errorf("%s: returned %v after its %v deadline (the scheduler's own delay meanwhile: %v); the contract allows %v",
			what, late.Round(time.Millisecond), d, sched.Round(time.Millisecond), inventory.DeadlineSlack)
	}
	return own, err
}

// watchTick is how often the watcher wakes; a wake-up more than a tick late
// is counted as a stall.
const watchTick = time.Millisecond

// watchKeep is how long a stall is remembered: longer than any deadline a
// test checks.
const watchKeep = time.Minute

// watch is the process's scheduler watcher; it runs while a Late does.
var watch schedWatch

type schedWatch struct {
	mu     sync.Mutex
	users  int
	stop   chan struct{}
	done   chan struct{}
	stalls []span          // oldest first
	woken  []chan struct{} // closed at the watcher's next wake-up
}

type span struct{ from, to time.Time }

// start runs the watcher if it is not running, and returns the function
// that ends this use of it; the last use stops it and waits for it.
func (w *schedWatch) start() (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.users++
	if w.users == 1 {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.run(w.stop, w.done)
	}
	return func() {
		w.mu.Lock()
		w.users--
		if w.users > 0 {
			w.mu.Unlock()
			return
		}
		stop, done := w.stop, w.done
		w.mu.Unlock()
		close(stop)
		<-done
	}
}

func (w *schedWatch) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(watchTick)
	defer t.Stop()
	for {
		due := time.Now().Add(watchTick)
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if now := time.Now(); now.Sub(due) > watchTick {
			w.mu.Lock()
			i := 0
			for i < len(w.stalls) && now.Sub(w.stalls[i].to) > watchKeep {
				i++
			}
			w.stalls = append(w.stalls[i:], span{due, now})
			w.mu.Unlock()
		}
		w.mu.Lock()
		for _, c := range w.woken {
			close(c)
		}
		w.woken = w.woken[:0]
		w.mu.Unlock()
		t.Reset(watchTick)
	}
}

// wake waits for the watcher's next wake-up; the caller holds a use of it.
func (w *schedWatch) wake() {
	c := make(chan struct{})
	w.mu.Lock()
	w.woken = append(w.woken, c)
	w.mu.Unlock()
	<-c
}

// stalled is how long, between from and to, the watcher was kept from
// running past its tick.
func (w *schedWatch) stalled(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum time.Duration
	for _, s := range w.stalls {
		a, b := s.from, s.to
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			sum += b.Sub(a)
		}
	}
	return sum
}
