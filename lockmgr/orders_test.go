package lockmgr_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
)

// flakyStore is a HoldStore whose calls fail while fail says so: fail gets
// the method's name and, for the order steps, the step.
type flakyStore struct {
	lockmgr.HoldStore
	fail func(op string) error
}

var errDown = errors.New("flaky: the store is down")

func (f flakyStore) check(op string) error {
	if f.fail == nil {
		return nil
	}
	return f.fail(op)
}

func (f flakyStore) Hold(ctx context.Context, sku string, version, newStock int64, id string, qty int64, expires time.Time) (bool, error) {
	if err := f.check("Hold"); err != nil {
		return false, err
	}
	return f.HoldStore.Hold(ctx, sku, version, newStock, id, qty, expires)
}

func (f flakyStore) Unhold(ctx context.Context, sku, id string, sold bool) (int64, error) {
	if err := f.check("Unhold"); err != nil {
		return 0, err
	}
	return f.HoldStore.Unhold(ctx, sku, id, sold)
}

func (f flakyStore) UpdateOrder(ctx context.Context, id string, step lockmgr.OrderStep) (lockmgr.Order, bool, error) {
	if err := f.check("UpdateOrder/" + string(step)); err != nil {
		return lockmgr.Order{}, false, err
	}
	return f.HoldStore.UpdateOrder(ctx, id, step)
}

func (f flakyStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	if err := f.check("CompareAndSet/" + sku); err != nil {
		return false, err
	}
	return f.HoldStore.CompareAndSet(ctx, sku, version, newStock, dir, key)
}

func lines(kv ...any) []inventory.Line {
	var out []inventory.Line
	for i := 0; i < len(kv); i += 2 {
		out = append(out, inventory.Line{SKU: kv[i].(string), Qty: int64(kv[i+1].(int))})
	}
	return out
}

func initAll(t *testing.T, m *lockmgr.Manager, qty int64, skus ...string) {
	t.Helper()
	for _, s := range skus {
		require.NoError(t, m.Init(context.Background(), s, qty))
	}
}

// levels checks the available and held units of sku.
func levels(t *testing.T, m *lockmgr.Manager, sku string, available, held int64) {
	t.Helper()
	ctx := context.Background()
	n, err := m.Get(ctx, sku)
	require.NoError(t, err)
	h, err := m.Held(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, [2]int64{available, held}, [2]int64{n, h}, "available and held units of %q", sku)
}

// TestOrdersNeedHoldStore: over a plain Store the order calls are
// unsupported, after the argument checks.
func TestOrdersNeedHoldStore(t *testing.T) {
	ctx := context.Background()
	m := lockmgr.MustNew(newFakeLocker(0), newMemStore())
	l := lines("a", 1)
	for name, err := range map[string]error{
		"ReduceLines": m.ReduceLines(ctx, l),
		"ReturnLines": m.ReturnLines(ctx, l),
		"Reserve":     m.Reserve(ctx, "o", l, time.Minute),
		"Confirm":     m.Confirm(ctx, "o"),
		"Cancel":      m.Cancel(ctx, "o"),
	} {
		require.ErrorIs(t, err, errors.ErrUnsupported, name)
	}
	_, err := m.Held(ctx, "a")
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = m.Sweep(ctx)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorIs(t, m.Reserve(ctx, "", l, time.Minute), inventory.ErrInvalidArgument, "arguments first")
}

// TestReserveCrashMidway: the store goes down after the first line of a
// three-line Reserve is held, so the Reserve can neither hold the rest nor
// give the first back. Its units stay out of the available stock (never
// sold twice), Confirm and Cancel do not see the hold, and once the
// abandon grace has passed since the order was recorded Sweep gives them
// back and frees the id (here after the TTL: a line past its TTL is not
// released by a later call before its order is abandoned either).
func TestReserveCrashMidway(t *testing.T) {
	ctx := context.Background()
	// The grace is 300 ms, or longer when the checks within it came late.
	testenv.TTLRounds(t, 300*time.Millisecond, 5*time.Second, func(grace time.Duration) bool {
		var down atomic.Bool
		var holds atomic.Int64
		st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
			if op == "Hold" && holds.Add(1) == 2 {
				down.Store(true)
			}
			if down.Load() {
				return errDown
			}
			return nil
		}}
		const ttl = 100 * time.Millisecond
		m := lockmgr.MustNew(newFakeLocker(0), st, lockmgr.WithAbandonGrace(grace))
		initAll(t, m, 10, "a", "b", "c")

		start := time.Now()
		require.ErrorIs(t, m.Reserve(ctx, "o", lines("a", 2, "b", 3, "c", 4), ttl), errDown)
		down.Store(false)
		levels(t, m, "a", 8, 2)
		levels(t, m, "b", 10, 0)
		require.ErrorIs(t, m.Confirm(ctx, "o"), inventory.ErrNotFound, "an incomplete hold is no hold")
		require.ErrorIs(t, m.Cancel(ctx, "o"), inventory.ErrNotFound)

		// Past the TTL, within the grace: the Reserve might still be running.
		time.Sleep(time.Until(start.Add(ttl + 50*time.Millisecond)))
		n, sweepErr := m.Sweep(ctx)
		_, err := m.Reduce(ctx, "a", 1) // lazy release must wait as well
		if !testenv.Live(t, start, grace, "the Sweep and Reduce within the grace") {
			return false
		}
		require.NoError(t, sweepErr)
		require.Zero(t, n)
		require.NoError(t, err)
		levels(t, m, "a", 7, 2)

		time.Sleep(time.Until(start.Add(grace + 50*time.Millisecond)))
		n, err = m.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		levels(t, m, "a", 9, 0)
		require.NoError(t, m.Reserve(ctx, "o", lines("a", 1), time.Minute), "the failed Reserve did not use up its id")
		return true
	})
}

// TestReserveGivesBack: a refused line gives back the lines before it,
// and the refusal names the line and what it found.
func TestReserveGivesBack(t *testing.T) {
	ctx := context.Background()
	m := lockmgr.MustNew(newFakeLocker(0), lockmgrtest.NewMemoryStore(0))
	initAll(t, m, 5, "a", "b", "c")
	err := m.Reserve(ctx, "o", lines("a", 1, "b", 6, "c", 1), time.Minute)
	var short *inventory.InsufficientError
	require.ErrorAs(t, err, &short)
	require.Equal(t, []inventory.Shortfall{{Line: inventory.Line{SKU: "b", Qty: 6}, Available: 5}}, short.Short)
	for _, s := range []string{"a", "b", "c"} {
		levels(t, m, s, 5, 0)
	}
	require.NoError(t, m.Reserve(ctx, "o", lines("a", 1, "b", 5), time.Minute))
	levels(t, m, "b", 0, 5)
	require.ErrorIs(t, m.Reserve(ctx, "p", lines("c", 1, "zz", 1), time.Minute), inventory.ErrNotFound)
	levels(t, m, "c", 5, 0)
}

// blindHoldStore holds whatever the version: it shows what Hold's
// compare-and-set prevents.
type blindHoldStore struct{ lockmgr.HoldStore }

func (b blindHoldStore) Hold(ctx context.Context, sku string, _, newStock int64, id string, qty int64, expires time.Time) (bool, error) {
	_, version, err := b.Read(ctx, sku)
	if err != nil {
		return false, err
	}
	return b.HoldStore.Hold(ctx, sku, version, newStock, id, qty, expires)
}

// TestPausedReserve pauses a Reserve between its checks and its Hold
// until its lock has lapsed and another buyer has reserved the last unit:
// the compare-and-set sends it round again to find the stock gone. A store
// that holds blindly holds the unit twice.
func TestPausedReserve(t *testing.T) {
	for name, blind := range map[string]bool{"cas": false, "blind": true} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var st lockmgr.HoldStore = lockmgrtest.NewMemoryStore(0)
			if blind {
				st = blindHoldStore{st}
			}
			m := lockmgr.MustNew(newFakeLocker(50*time.Millisecond), st)
			initAll(t, m, 1, "a")
			other := lockmgr.MustNew(newFakeLocker(0), st)
			var once sync.Once
			lockmgr.SetBeforeWrite(m, func(string) {
				once.Do(func() {
					time.Sleep(100 * time.Millisecond) // the lock lapses
					require.NoError(t, other.Reserve(ctx, "other", lines("a", 1), time.Minute))
				})
			})
			err := m.Reserve(ctx, "paused", lines("a", 1), time.Minute)
			held, herr := m.Held(ctx, "a")
			require.NoError(t, herr)
			if blind {
				require.NoError(t, err)
				require.EqualValues(t, 2, held, "the blind store held one unit twice")
				return
			}
			require.ErrorIs(t, err, inventory.ErrInsufficientStock)
			levels(t, m, "a", 0, 1)
		})
	}
}

// TestConfirmRacesLazyRelease races Confirm of a two-line hold against
// Reduces of its SKUs from the moment it expires, which release expired
// lines lazily. Whoever wins, no unit is lost or sold twice.
func TestConfirmRacesLazyRelease(t *testing.T) {
	ctx := context.Background()
	st := lockmgrtest.NewMemoryStore(0)
	m := lockmgr.MustNew(newFakeLocker(0), st)
	const rounds, ttl = 50, 20 * time.Millisecond
	initAll(t, m, 2*rounds, "a", "b")
	var confirmed int64
	var reduced [2]atomic.Int64
	for r := range rounds {
		id := fmt.Sprint("o", r)
		require.NoError(t, m.Reserve(ctx, id, lines("a", 1, "b", 1), ttl))
		o, err := st.Order(ctx, "h:"+id)
		require.NoError(t, err)
		time.Sleep(time.Until(o.Expires.Add(time.Duration(r%5-2) * time.Millisecond)))
		var wg sync.WaitGroup
		var cerr error
		wg.Go(func() { cerr = m.Confirm(ctx, id) })
		for i, s := range []string{"a", "b"} {
			wg.Go(func() {
				if _, err := m.Reduce(ctx, s, 1); err == nil {
					reduced[i].Add(1)
				}
			})
		}
		wg.Wait()
		switch {
		case cerr == nil:
			confirmed++
		case !errors.Is(cerr, inventory.ErrHoldReleased):
			t.Fatalf("Confirm: %v", cerr)
		}
		_, err = m.Sweep(ctx)
		require.NoError(t, err)
	}
	for i, s := range []string{"a", "b"} {
		n, err := m.Get(ctx, s)
		require.NoError(t, err)
		h, err := m.Held(ctx, s)
		require.NoError(t, err)
		require.Zero(t, h, "held units of %q after the sweeps", s)
		require.Equal(t, 2*rounds-confirmed, n+reduced[i].Load(), "units of %q: available + reduced == initial - confirmed", s)
	}
	t.Logf("%d of %d Confirms won", confirmed, rounds)
}

// TestSweepCountsOnce: concurrent Sweeps release each expired hold once.
func TestSweepCountsOnce(t *testing.T) {
	ctx := context.Background()
	m := lockmgr.MustNew(newFakeLocker(0), lockmgrtest.NewMemoryStore(0))
	const holds = 40
	initAll(t, m, holds, "a", "b")
	for i := range holds {
		require.NoError(t, m.Reserve(ctx, fmt.Sprint("o", i), lines("a", 1, "b", 1), time.Millisecond))
	}
	time.Sleep(20 * time.Millisecond)
	var released atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			n, err := m.Sweep(ctx)
			require.NoError(t, err)
			released.Add(int64(n))
		})
	}
	wg.Wait()
	require.EqualValues(t, holds, released.Load())
	levels(t, m, "a", holds, 0)
	levels(t, m, "b", holds, 0)
}

// TestReturnLinesAllOrNothing: a line that would pass MaxStock refuses the
// whole call.
func TestReturnLinesAllOrNothing(t *testing.T) {
	ctx := context.Background()
	m := lockmgr.MustNew(newFakeLocker(0), lockmgrtest.NewMemoryStore(0))
	initAll(t, m, 5, "a", "c")
	initAll(t, m, inventory.MaxStock-1, "b")
	require.ErrorIs(t, m.ReturnLines(ctx, lines("c", 1, "b", 2, "a", 1)), inventory.ErrInvalidArgument)
	levels(t, m, "a", 5, 0)
	levels(t, m, "c", 5, 0)
	require.ErrorIs(t, m.ReturnLines(ctx, lines("a", 1, "zz", 1)), inventory.ErrNotFound)
	levels(t, m, "a", 5, 0)
	require.NoError(t, m.ReturnLines(ctx, lines("c", 1, "b", 1, "a", 2), inventory.WithKey("k")))
	levels(t, m, "a", 7, 0)
	levels(t, m, "b", inventory.MaxStock, 0)
	require.ErrorIs(t, m.ReturnLines(ctx, lines("a", 1), inventory.WithKey("k")), inventory.ErrDuplicate)
	levels(t, m, "a", 7, 0)
}

// TestReduceLinesRetryFinishes: a keyed ReduceLines whose Confirm step
// failed holds every line; its retry with the same key sells them once,
// and a further repeat is a duplicate.
func TestReduceLinesRetryFinishes(t *testing.T) {
	ctx := context.Background()
	var fails atomic.Int64
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "UpdateOrder/confirm" && fails.Add(1) == 1 {
			return errDown
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b")
	require.ErrorIs(t, m.ReduceLines(ctx, lines("a", 1, "b", 2), inventory.WithKey("k")), errDown)
	levels(t, m, "a", 9, 1)
	require.NoError(t, m.ReduceLines(ctx, lines("a", 1, "b", 2), inventory.WithKey("k")))
	levels(t, m, "a", 9, 0)
	levels(t, m, "b", 8, 0)
	require.ErrorIs(t, m.ReduceLines(ctx, lines("a", 1, "b", 2), inventory.WithKey("k")), inventory.ErrDuplicate)
	levels(t, m, "a", 9, 0)
}

// TestConfirmSettleFails: a Confirm that won but could not settle its
// lines reports the error; its retry settles them and is a duplicate, and
// the units are sold once.
func TestConfirmSettleFails(t *testing.T) {
	ctx := context.Background()
	var fails atomic.Int64
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "Unhold" && fails.Add(1) == 1 {
			return errDown
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a")
	require.NoError(t, m.Reserve(ctx, "o", lines("a", 3), time.Minute))
	require.ErrorIs(t, m.Confirm(ctx, "o"), errDown)
	levels(t, m, "a", 7, 3)
	require.ErrorIs(t, m.Confirm(ctx, "o"), inventory.ErrDuplicate)
	levels(t, m, "a", 7, 0)
	require.ErrorIs(t, m.Cancel(ctx, "o"), inventory.ErrHoldConfirmed)
	levels(t, m, "a", 7, 0)
}

// TestReturnLinesFinishes: a keyed ReturnLines whose second line cannot be
// written returns an error that invites no blind retry (it is not
// ErrContention); the retry with its key writes the missing lines, each
// once, and reports ErrDuplicate.
func TestReturnLinesFinishes(t *testing.T) {
	ctx := context.Background()
	var down atomic.Bool
	down.Store(true)
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "CompareAndSet/b" && down.Load() {
			return errDown
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b", "c")
	err := m.ReturnLines(ctx, lines("c", 3, "a", 1, "b", 2), inventory.WithKey("k"))
	require.ErrorIs(t, err, errDown)
	require.NotErrorIs(t, err, inventory.ErrContention)
	levels(t, m, "c", 13, 0) // the lines are written in the call's order
	levels(t, m, "a", 11, 0)
	levels(t, m, "b", 10, 0)
	down.Store(false)
	require.ErrorIs(t, m.ReturnLines(ctx, lines("c", 3, "a", 1, "b", 2), inventory.WithKey("k")), inventory.ErrDuplicate)
	levels(t, m, "a", 11, 0)
	levels(t, m, "b", 12, 0)
	levels(t, m, "c", 13, 0)
	require.ErrorIs(t, m.ReturnLines(ctx, lines("c", 3, "a", 1, "b", 2), inventory.WithKey("k")), inventory.ErrDuplicate)
	levels(t, m, "c", 13, 0)
}

// errBusy is a store's "gave up, nothing written", as sqlstore returns it
// for a busy database or a deadlock: ErrContention and the driver's error,
// errLocked.
var (
	errLocked = errors.New("flaky: database is locked")
	errBusy   = fmt.Errorf("flaky: %w: %w", inventory.ErrContention, errLocked)
)

// requireSettled checks that err, the error of a call that moved
// something, does not say that nothing changed, and still carries its
// cause.
func requireSettled(t *testing.T, err, cause error) {
	t.Helper()
	require.Error(t, err)
	require.False(t, nothingChanged(err), "the call moved units, yet its error says nothing changed: %v", err)
	if cause != nil {
		require.ErrorIs(t, err, cause)
	}
}

// TestReserveCompleteBusy: the store is busy when a Reserve that holds
// every line marks its order complete. Once the store answers again the
// Reserve completes; while it does not, the Reserve gives its lines back
// before it reports ErrContention.
func TestReserveCompleteBusy(t *testing.T) {
	ctx := context.Background()
	var fails atomic.Int64
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "UpdateOrder/complete" && fails.Add(-1) >= 0 {
			return errBusy
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b")

	fails.Store(2)
	require.NoError(t, m.Reserve(ctx, "o", lines("a", 1, "b", 2), time.Minute), "a busy store is asked again")
	levels(t, m, "a", 9, 1)

	fails.Store(1 << 30)
	err := m.Reserve(ctx, "p", lines("a", 1, "b", 2), time.Minute)
	require.ErrorIs(t, err, inventory.ErrContention)
	levels(t, m, "a", 9, 1)
	levels(t, m, "b", 8, 2)
	fails.Store(0)
	require.NoError(t, m.Reserve(ctx, "p", lines("a", 1, "b", 2), time.Minute), "the Reserve that gave up did not use up its id")
	levels(t, m, "b", 6, 4)
}

// TestReserveGiveBackFails: a Reserve whose second line is refused cannot
// give the first one back: its error must not say that nothing changed
// (the first line stays held until the order is abandoned).
func TestReserveGiveBackFails(t *testing.T) {
	ctx := context.Background()
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "Unhold" {
			return errDown
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b")
	err := m.Reserve(ctx, "o", lines("a", 1, "b", 20), time.Minute)
	requireSettled(t, err, errDown)
	levels(t, m, "a", 9, 1)
}

// TestSettleBusy: a Confirm or Cancel that decided its hold but finds the
// store busy while it settles the lines took effect: it settles them once
// the store answers, and if it never does within ctx, its error does not
// say that nothing changed.
func TestSettleBusy(t *testing.T) {
	for _, confirm := range []bool{true, false} {
		t.Run(fmt.Sprint("confirm=", confirm), func(t *testing.T) {
			ctx := context.Background()
			var fails atomic.Int64
			st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
				if op == "Unhold" && fails.Add(-1) >= 0 {
					return errBusy
				}
				return nil
			}}
			m := lockmgr.MustNew(newFakeLocker(0), st)
			initAll(t, m, 10, "a")
			end, other, otherErr, left := m.Confirm, m.Cancel, inventory.ErrHoldConfirmed, int64(7)
			if !confirm {
				end, other, otherErr, left = m.Cancel, m.Confirm, inventory.ErrHoldReleased, 10
			}
			require.NoError(t, m.Reserve(ctx, "o", lines("a", 3), time.Minute))
			fails.Store(2)
			require.NoError(t, end(ctx, "o"))
			levels(t, m, "a", left, 0)
			require.ErrorIs(t, other(ctx, "o"), otherErr)

			require.NoError(t, m.Reserve(ctx, "p", lines("a", 3), time.Minute))
			fails.Store(1 << 30)
			shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			requireSettled(t, end(shortCtx, "p"), errLocked)
			fails.Store(0)
			require.ErrorIs(t, other(ctx, "p"), otherErr, "the hold was decided")
			if err := end(ctx, "p"); confirm { // a repeat settles the lines
				require.ErrorIs(t, err, inventory.ErrDuplicate)
			} else {
				require.NoError(t, err)
			}
			levels(t, m, "a", 2*left-10, 0)
		})
	}
}

// TestReduceLinesConfirmBusy: a ReduceLines that holds its lines and
// cannot confirm them (the store stays busy) gives them back before it
// reports ErrContention, without a key; with one, it leaves them held for
// its retry, which sells them, and says that its outcome is open.
func TestReduceLinesConfirmBusy(t *testing.T) {
	ctx := context.Background()
	var busy atomic.Bool
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "UpdateOrder/confirm" && busy.Load() {
			return errBusy
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b")
	busy.Store(true)
	require.ErrorIs(t, m.ReduceLines(ctx, lines("a", 1, "b", 2)), inventory.ErrContention)
	levels(t, m, "a", 10, 0)
	levels(t, m, "b", 10, 0)

	requireSettled(t, m.ReduceLines(ctx, lines("a", 1, "b", 2), inventory.WithKey("k")), errLocked)
	levels(t, m, "a", 9, 1)
	busy.Store(false)
	require.NoError(t, m.ReduceLines(ctx, lines("a", 1, "b", 2), inventory.WithKey("k")))
	levels(t, m, "a", 9, 0)
	levels(t, m, "b", 8, 0)
}

// TestReturnLinesRecordBusy: a keyed ReturnLines that returned every line
// and finds the store busy while it records its key took effect: its
// error does not say that nothing changed, and its retry is a duplicate.
func TestReturnLinesRecordBusy(t *testing.T) {
	ctx := context.Background()
	var busy atomic.Bool
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0), fail: func(op string) error {
		if op == "UpdateOrder/confirm" && busy.Load() {
			return errBusy
		}
		return nil
	}}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b")
	busy.Store(true)
	shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	requireSettled(t, m.ReturnLines(shortCtx, lines("a", 1, "b", 2), inventory.WithKey("k")), errLocked)
	levels(t, m, "a", 11, 0)
	levels(t, m, "b", 12, 0)
	busy.Store(false)
	require.ErrorIs(t, m.ReturnLines(ctx, lines("a", 1, "b", 2), inventory.WithKey("k")), inventory.ErrDuplicate)
	levels(t, m, "b", 12, 0)
}

// TestRetriedReserveWhileGivingBack is the flashsale -carts failure of
// redlock: a Reserve whose ctx ends while it holds its lines goes on
// giving them back after it returned; a retry with the same id meanwhile
// must not report ErrDuplicate ("an earlier Reserve took effect"), since
// that one is being undone: the buyer then Confirms a hold that vanishes.
// It is ErrContention until the give-back ends, and then takes effect.
func TestRetriedReserveWhileGivingBack(t *testing.T) {
	ctx := context.Background()
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // on failure too: no goroutine left waiting
	var holds atomic.Int64
	st := flakyStore{HoldStore: lockmgrtest.NewMemoryStore(0)}
	first, cancel := context.WithCancel(ctx)
	st.fail = func(op string) error {
		switch {
		case op == "Hold" && holds.Add(1) == 2:
			cancel() // the first Reserve's ctx ends as it holds its second line
			return context.Canceled
		case op == "Unhold":
			<-gate // its give-back is slow
		}
		return nil
	}
	m := lockmgr.MustNew(newFakeLocker(0), st)
	initAll(t, m, 10, "a", "b")
	require.ErrorIs(t, m.Reserve(first, "o", lines("a", 1, "b", 1), time.Minute), context.Canceled)

	err := m.Reserve(ctx, "o", lines("a", 1, "b", 1), time.Minute)
	require.NotErrorIs(t, err, inventory.ErrDuplicate, "the earlier Reserve of this id is being given back")
	require.ErrorIs(t, err, inventory.ErrContention)
	open()
	for {
		err = m.Reserve(ctx, "o", lines("a", 1, "b", 1), time.Minute)
		if !errors.Is(err, inventory.ErrContention) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, err)
	require.NoError(t, m.Confirm(ctx, "o"))
	levels(t, m, "a", 9, 0)
	levels(t, m, "b", 9, 0)
}
