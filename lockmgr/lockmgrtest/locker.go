package lockmgrtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/lateness"
	"github.com/stockkit/inventory/lockmgr"
)

// LockerConfig says how to make the Lockers under test.
type LockerConfig struct {
	// NewLocker returns a Locker. A subtest may call it several times:
	// Lockers from successive calls must share one backend, as the Lockers
	// of separate processes would, and exclude one another. Release what it
	// opens with t.Cleanup.
	NewLocker func(t *testing.T) lockmgr.Locker

	// Lapse makes the lock on name, held through l, lapse as it does when
	// its holder pauses past its TTL or its session ends: the holder's
	// Lease must then report Lost, and another Locker must be able to take
	// name (at once, or once what Lapse did has passed, within Timeout).
	// When nil, the subtests that need a lapse skip, saying so.
	Lapse func(t *testing.T, l lockmgr.Locker, name string)

	// Lockers is how many Lockers contend in Exclusion; the default is 3.
	Lockers int

	// Workers is how many goroutines use each of them; the default is 8.
	Workers int

	// Rounds is how many times each goroutine takes the lock; the default
	// is 5.
	Rounds int

	// Wait is how long a waiter waits in the subtests where it must not
	// get the lock; the default is 300ms.
	Wait time.Duration

	// Timeout bounds each subtest; the default is 2 minutes.
	Timeout time.Duration
}

func (c *LockerConfig) defaults() {
	c.Lockers = cmp(c.Lockers, 3)
	c.Workers = cmp(c.Workers, 8)
	c.Rounds = cmp(c.Rounds, 5)
	c.Wait = cmp(c.Wait, 300*time.Millisecond)
	c.Timeout = cmp(c.Timeout, 2*time.Minute)
}

// RunLocker runs the Locker conformance suite as subtests of t:
//
//   - Exclusion: goroutines on several Lockers each take the lock and
//     increment a shared counter by read, sleep, write; the count must be
//     exact, and no two may ever hold the lock at once.
//   - LostOnLapse: a lease whose lock lapsed reports it on Lost.
//   - LapsedReleaseRefused: once a lapsed lock is taken by another Locker,
//     the first lease's Release returns an error and frees nothing.
//   - CancelledContext: Acquire with a done ctx fails with an error that
//     wraps ctx.Err(), whether or not the lock is free.
//   - DeadlineWhileWaiting: a waiter returns within [inventory.DeadlineSlack]
//     of its ctx deadline, with an error that wraps ctx.Err().
//   - ByteExactNames: odd names (case, spaces, braces, CJK, decomposed
//     accents) are distinct locks, each excluding only itself.
func RunLocker(t *testing.T, cfg LockerConfig) {
	t.Helper()
	if cfg.NewLocker == nil {
		t.Fatal("lockmgrtest: LockerConfig.NewLocker is nil")
	}
	cfg.defaults()
	s := &lockerSuite{cfg}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Exclusion", s.testExclusion},
		{"LostOnLapse", s.testLostOnLapse},
		{"LapsedReleaseRefused", s.testLapsedReleaseRefused},
		{"CancelledContext", s.testCancelledContext},
		{"DeadlineWhileWaiting", s.testDeadline},
		{"ByteExactNames", s.testNames},
	} {
		t.Run(tc.name, tc.fn)
	}
}

type lockerSuite struct{ cfg LockerConfig }

func (s *lockerSuite) lockers(t *testing.T, n int) []lockmgr.Locker {
	ls := make([]lockmgr.Locker, n)
	for i := range ls {
		ls[i] = s.cfg.NewLocker(t)
	}
	return ls
}

func release(t *testing.T, le lockmgr.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := le.Release(ctx); err != nil {
		t.Errorf("Release of a held lock: %v", err)
	}
}

func (s *lockerSuite) testExclusion(t *testing.T) {
	ctx := timeoutCtx(t, s.cfg.Timeout)
	name := prefix(t) + "counter"
	var (
		counter  atomic.Int64 // read and written in two steps: a plain counter
		holders  atomic.Int64
		overlaps atomic.Int64
		wg       sync.WaitGroup
	)
	for _, l := range s.lockers(t, s.cfg.Lockers) {
		for range s.cfg.Workers {
			wg.Go(func() {
				for range s.cfg.Rounds {
					le, err := l.Acquire(ctx, name)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if holders.Add(1) != 1 {
						overlaps.Add(1)
					}
					n := counter.Load()
					time.Sleep(time.Millisecond)
					counter.Store(n + 1)
					holders.Add(-1)
					release(t, le)
				}
			})
		}
	}
	wg.Wait()
	want := int64(s.cfg.Lockers * s.cfg.Workers * s.cfg.Rounds)
	if got := counter.Load(); got != want {
		t.Errorf("counter = %d after %d increments under the lock: %d lost", got, want, want-got)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d times a holder took the lock while another held it", n)
	}
}

func (s *lockerSuite) needLapse(t *testing.T) {
	if s.cfg.Lapse == nil {
		t.Skip("LockerConfig.Lapse is nil: this Locker offers no way to make a lock lapse")
	}
}

// lost waits for le.Lost until d passes.
func lost(le lockmgr.Lease, d time.Duration) bool {
	select {
	case <-le.Lost():
		return true
	case <-time.After(d):
		return false
	}
}

func (s *lockerSuite) testLostOnLapse(t *testing.T) {
	s.needLapse(t)
	ctx := timeoutCtx(t, s.cfg.Timeout)
	l := s.cfg.NewLocker(t)
	name := prefix(t) + "x"
	le, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer func() { _ = le.Release(context.WithoutCancel(ctx)) }()
	if lost(le, 0) {
		t.Fatal("Lost is closed on a lease just taken")
	}
	s.cfg.Lapse(t, l, name)
	if !lost(le, s.cfg.Timeout/2) {
		t.Errorf("Lost not closed %v after the lock lapsed", s.cfg.Timeout/2)
	}
}

func (s *lockerSuite) testLapsedReleaseRefused(t *testing.T) {
	s.needLapse(t)
	ctx := timeoutCtx(t, s.cfg.Timeout)
	ls := s.lockers(t, 3)
	a, b, c := ls[0], ls[1], ls[2]
	name := prefix(t) + "x"
	la, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	s.cfg.Lapse(t, a, name)
	lost(la, s.cfg.Timeout/4) // LostOnLapse reports a Lost that never fires
	lb, err := b.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire of a lapsed lock by another Locker: %v", err)
	}
	if err := la.Release(ctx); err == nil {
		t.Error("Release of a lease whose lock lapsed and was taken by another returned nil")
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	lc, err := s.await(t, c, wctx, name, lb) // and releases lb
	cancel()
	if err == nil {
		t.Error("a third Locker took the lock while its new holder still held it: the lapsed lease's Release freed it")
		release(t, lc)
	}
	lc, err = c.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire after the holder released: %v", err)
	}
	release(t, lc)
}

func (s *lockerSuite) testCancelledContext(t *testing.T) {
	ctx := timeoutCtx(t, s.cfg.Timeout)
	ls := s.lockers(t, 2)
	name := prefix(t) + "x"
	done, cancel := context.WithCancel(ctx)
	cancel()
	if le, err := ls[0].Acquire(done, name); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire of a free lock with a cancelled ctx: err = %v, want one that wraps context.Canceled", err)
		if err == nil {
			release(t, le)
		}
	}
	held, err := ls[0].Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(s.cfg.Wait/3, cancel)
	le, err := s.await(t, ls[1], wctx, name, held)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire of a held lock, cancelled while waiting: err = %v, want one that wraps context.Canceled", err)
	}
	if le != nil {
		release(t, le)
	}
}

// await runs l.Acquire(ctx, name) while held holds name; it releases held
// once that Acquire returned, or after Timeout/4 if it does not return (a
// Locker that ignores ctx), so the suite never hangs.
func (s *lockerSuite) await(t *testing.T, l lockmgr.Locker, ctx context.Context, name string, held lockmgr.Lease) (lockmgr.Lease, error) {
	type res struct {
		le  lockmgr.Lease
		err error
	}
	ch := make(chan res, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		ch <- res{le, err}
	}()
	select {
	case r := <-ch:
		release(t, held)
		return r.le, r.err
	case <-time.After(s.cfg.Timeout / 4):
		t.Errorf("Acquire of a held lock did not return %v after its ctx was done", s.cfg.Timeout/4)
		release(t, held)
		r := <-ch
		return r.le, r.err
	}
}

func (s *lockerSuite) testDeadline(t *testing.T) {
	ctx := timeoutCtx(t, s.cfg.Timeout)
	ls := s.lockers(t, 2)
	name := prefix(t) + "x"
	held, err := ls[0].Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	type res struct {
		le  lockmgr.Lease
		err error
	}
	var le lockmgr.Lease
	// The lateness is measured to Acquire's return, net of the scheduler's
	// own delay (lateness.CheckLate); held is released only after it, or
	// once Acquire is a quarter of Timeout late (a Locker that ignores ctx),
	// so that the suite never hangs.
	_, err = lateness.CheckLate(t, "Acquire of a held lock", s.cfg.Wait, func(wctx context.Context) error {
		ch := make(chan res, 1)
		go func() {
			le, err := ls[1].Acquire(wctx, name)
			ch <- res{le, err}
		}()
		select {
		case r := <-ch:
			le = r.le
			return r.err
		case <-time.After(s.cfg.Wait + s.cfg.Timeout/4):
			t.Errorf("Acquire of a held lock did not return %v after its ctx was done", s.cfg.Timeout/4)
			release(t, held)
			held = nil
			r := <-ch
			le = r.le
			return r.err
		}
	})
	if held != nil {
		release(t, held)
	}
	if le != nil {
		release(t, le)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire of a held lock past its deadline: err = %v, want one that wraps context.DeadlineExceeded", err)
	}
}

func (s *lockerSuite) testNames(t *testing.T) {
	ctx := timeoutCtx(t, s.cfg.Timeout)
	ls := s.lockers(t, 2)
	p := prefix(t)
	leases := make([]lockmgr.Lease, 0, len(names))
	releaseAll := func() {
		for _, le := range leases {
			release(t, le)
		}
		leases = nil
	}
	defer releaseAll()
	for _, n := range names {
		// Every other name is held already: a Locker that folds, trims
		// or normalises waits here for one of them.
		actx, cancel := context.WithTimeout(ctx, 10*s.cfg.Wait)
		le, err := ls[0].Acquire(actx, p+n)
		cancel()
		if err != nil {
			t.Errorf("Acquire(%q) while holding the other odd names: %v", n, err)
			continue
		}
		leases = append(leases, le)
	}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
			defer cancel()
			if le, err := ls[1].Acquire(wctx, p+n); err == nil {
				t.Errorf("another Locker took %q while it was held", n)
				release(t, le)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.Timeout / 4):
		t.Errorf("Acquire of a held lock did not return %v after its ctx was done", s.cfg.Timeout/4)
		releaseAll()
		<-done
	}
}
