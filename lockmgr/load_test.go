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
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
)

// nothingChanged reports whether err says that the call changed nothing:
// it wraps one of the sentinels that promise so.
func nothingChanged(err error) bool {
	for _, s := range []error{inventory.ErrContention, inventory.ErrInsufficientStock, inventory.ErrNotFound,
		inventory.ErrInvalidArgument, inventory.ErrHoldReleased, inventory.ErrHoldConfirmed, inventory.ErrDuplicate} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// TestOrdersUnderLoad runs the calls of issue 27 concurrently over every
// store (SQLite as the README opens it among them) and checks that every
// call that reports "nothing changed" changed nothing, and that every
// other call took effect: the units held and sold are exactly those of the
// calls that succeeded.
func TestOrdersUnderLoad(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.new(t)
			newM := func() *lockmgr.Manager { return lockmgr.MustNew(newFakeLocker(0), s) }
			t.Run("Reserve", func(t *testing.T) { loadReserve(t, newM()) })
			t.Run("ConfirmRacesCancel", func(t *testing.T) { loadConfirmCancel(t, newM()) })
			t.Run("KeyedReduceLines", func(t *testing.T) { loadKeyedReduceLines(t, newM()) })
		})
	}
}

// errs counts the errors of concurrent calls by kind.
type errs struct {
	mu      sync.Mutex
	ok      int
	refused map[string]int // nothing changed, by error
	other   []error        // neither success nor "nothing changed"
}

func (e *errs) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err == nil:
		e.ok++
	case nothingChanged(err):
		if e.refused == nil {
			e.refused = map[string]int{}
		}
		e.refused[err.Error()]++
	default:
		e.other = append(e.other, err)
	}
}

// loadReserve: 100 Reserves of one unit of each of two SKUs at once. The
// units held are those of the Reserves that succeeded.
func loadReserve(t *testing.T, m *lockmgr.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testenv.Prefix()
	a, b := p+"a", p+"b"
	initAll(t, m, 1000, a, b)
	var e errs
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() { e.add(m.Reserve(ctx, fmt.Sprint(p, "h", i), lines(a, 1, b, 1), time.Minute)) })
	}
	wg.Wait()
	t.Logf("%d Reserves succeeded; refused: %v", e.ok, e.refused)
	require.Empty(t, e.other, "errors that neither succeed nor say nothing changed")
	levels(t, m, a, 1000-int64(e.ok), int64(e.ok))
	levels(t, m, b, 1000-int64(e.ok), int64(e.ok))
}

// loadConfirmCancel: 100 holds, each Confirmed and Cancelled at once:
// for every hold exactly one of the two wins, and the other says why.
func loadConfirmCancel(t *testing.T, m *lockmgr.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testenv.Prefix()
	a, b := p+"a", p+"b"
	const n = 100
	initAll(t, m, 1000, a, b)
	for i := range n {
		require.NoError(t, m.Reserve(ctx, fmt.Sprint(p, "h", i), lines(a, 1, b, 1), time.Minute))
	}
	var confirmed atomic.Int64
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprint(p, "h", i)
		var cerr, xerr error
		var pair sync.WaitGroup
		pair.Go(func() { cerr = m.Confirm(ctx, id) })
		pair.Go(func() { xerr = m.Cancel(ctx, id) })
		wg.Go(func() {
			pair.Wait()
			switch {
			case cerr == nil && errors.Is(xerr, inventory.ErrHoldConfirmed):
				confirmed.Add(1)
			case xerr == nil && errors.Is(cerr, inventory.ErrHoldReleased):
			default:
				mu.Lock()
				defer mu.Unlock()
				problems = append(problems, fmt.Sprintf("hold %d: Confirm: %v; Cancel: %v", i, cerr, xerr))
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d holds confirmed, the others cancelled", confirmed.Load(), n)
	require.Empty(t, problems, "for every hold exactly one of Confirm and Cancel wins")
	levels(t, m, a, 1000-confirmed.Load(), 0)
	levels(t, m, b, 1000-confirmed.Load(), 0)
}

// loadKeyedReduceLines: 50 ReduceLines with one key at once: one takes
// effect and says so, the others change nothing.
func loadKeyedReduceLines(t *testing.T, m *lockmgr.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testenv.Prefix()
	a, b := p+"a", p+"b"
	initAll(t, m, 1000, a, b)
	var e errs
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { e.add(m.ReduceLines(ctx, lines(a, 1, b, 2), inventory.WithKey(p+"key"))) })
	}
	wg.Wait()
	t.Logf("%d ReduceLines succeeded; refused: %v", e.ok, e.refused)
	require.Empty(t, e.other, "errors that neither succeed nor say nothing changed")
	require.Equal(t, 1, e.ok, "exactly one of the calls with one key succeeds")
	levels(t, m, a, 999, 0)
	levels(t, m, b, 998, 0)
}
