package lockmgr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
)

// cutStore is a HoldStore whose server is killed at the step after cut
// took effect (cut gets the method's name as flakyStore's fail does, and
// CreateOrder): that step and every later one fail with errDown until
// up is called. CreateOrder's own reply is lost when cut names it.
type cutStore struct {
	flakyStore
	cut  func(op string) bool
	down *atomic.Bool
}

func newCutStore(inner lockmgr.HoldStore, cut func(op string) bool) cutStore {
	down := new(atomic.Bool)
	c := cutStore{down: down, cut: cut}
	c.flakyStore = flakyStore{HoldStore: inner, fail: func(op string) error {
		if down.Load() {
			return errDown
		}
		if cut(op) {
			// This step goes through; the server dies before the next.
			defer down.Store(true)
		}
		return nil
	}}
	return c
}

func (c cutStore) up() { c.down.Store(false) }

func (c cutStore) CreateOrder(ctx context.Context, id string, lines []inventory.Line, ttl, grace time.Duration) (lockmgr.Order, error) {
	if c.down.Load() {
		return lockmgr.Order{}, errDown
	}
	o, err := c.HoldStore.CreateOrder(ctx, id, lines, ttl, grace)
	if err == nil && c.cut("CreateOrder") {
		c.down.Store(true)
		return lockmgr.Order{}, errDown // recorded, and the reply lost
	}
	return o, err
}

// oldRuleStore abandons an incomplete order grace after its expiry, as
// HoldStores did before the rule of grace after its creation: its
// CreateOrder passes the inner store ttl+grace for grace.
type oldRuleStore struct{ lockmgr.HoldStore }

func (o oldRuleStore) CreateOrder(ctx context.Context, id string, lines []inventory.Line, ttl, grace time.Duration) (lockmgr.Order, error) {
	return o.HoldStore.CreateOrder(ctx, id, lines, ttl, ttl+grace)
}

// TestRetryTakesOverAbandoned: a Reserve cut by a crash right after it
// recorded its order (or after it held its first line) leaves the order
// incomplete, and its give-back fails too. A retry with the same hold id
// says ErrContention while the order may still be its Reserve's, and
// once the abandon grace has passed since the order was recorded
// (long before the hour of the hold's TTL) it gives the order up itself,
// its held units back, and takes effect: the units are held once, and
// Confirm sells them. The same for a keyed ReduceLines and ReturnLines.
func TestRetryTakesOverAbandoned(t *testing.T) {
	const ttl = time.Hour
	for _, c := range []struct {
		name string
		cut  string // the step after which the server dies
		held int64  // units the cut Reserve left held
	}{{"after CreateOrder", "CreateOrder", 0}, {"after Hold", "Hold", 2}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			testenv.TTLRounds(t, 300*time.Millisecond, 5*time.Second, func(grace time.Duration) bool {
				var armed atomic.Bool
				st := newCutStore(lockmgrtest.NewMemoryStore(0), func(op string) bool {
					return op == c.cut && armed.CompareAndSwap(true, false)
				})
				m := lockmgr.MustNew(newFakeLocker(0), st, lockmgr.WithAbandonGrace(grace))
				initAll(t, m, 10, "a", "b")

				armed.Store(true)
				start := time.Now()
				require.ErrorIs(t, m.Reserve(ctx, "o", lines("a", 2, "b", 3), ttl), errDown)
				st.up()
				err := m.Reserve(ctx, "o", lines("a", 2, "b", 3), ttl)
				n, sweepErr := m.Sweep(ctx)
				if !testenv.Live(t, start, grace, "the retry within the grace") {
					return false
				}
				require.ErrorIs(t, err, inventory.ErrContention, "the order may still be its Reserve's")
				require.ErrorContains(t, err, "given up "+grace.String()+" after it was recorded")
				require.NoError(t, sweepErr)
				require.Zero(t, n)
				levels(t, m, "a", 10-c.held, c.held)

				time.Sleep(time.Until(start.Add(grace + 50*time.Millisecond)))
				require.NoError(t, m.Reserve(ctx, "o", lines("a", 2, "b", 3), ttl), "the retry takes the abandoned order over")
				levels(t, m, "a", 8, 2) // held once
				levels(t, m, "b", 7, 3)
				require.ErrorIs(t, m.Reserve(ctx, "o", lines("a", 2, "b", 3), ttl), inventory.ErrDuplicate)
				require.NoError(t, m.Confirm(ctx, "o"))
				levels(t, m, "a", 8, 0)
				levels(t, m, "b", 7, 0)
				n, err = m.Sweep(ctx)
				require.NoError(t, err)
				require.Zero(t, n, "nothing left to sweep")
				return true
			})
		})
	}
	for _, c := range []struct {
		name string
		call func(ctx context.Context, m *lockmgr.Manager) error
		a    int64 // a's stock after the call
	}{
		{"ReduceLines", func(ctx context.Context, m *lockmgr.Manager) error {
			return m.ReduceLines(ctx, lines("a", 2, "b", 3), inventory.WithKey("k"))
		}, 8},
		{"ReturnLines", func(ctx context.Context, m *lockmgr.Manager) error {
			return m.ReturnLines(ctx, lines("a", 2, "b", 3), inventory.WithKey("k"))
		}, 12},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			testenv.TTLRounds(t, 300*time.Millisecond, 5*time.Second, func(grace time.Duration) bool {
				var armed atomic.Bool
				st := newCutStore(lockmgrtest.NewMemoryStore(0), func(op string) bool {
					return op == "CreateOrder" && armed.CompareAndSwap(true, false)
				})
				// The lines calls' record lives a minute: a grace of
				// minutes would hide the take-over behind the TTL.
				m := lockmgr.MustNew(newFakeLocker(0), st, lockmgr.WithAbandonGrace(grace))
				initAll(t, m, 10, "a", "b")

				armed.Store(true)
				start := time.Now()
				require.ErrorIs(t, c.call(ctx, m), errDown)
				st.up()
				err := c.call(ctx, m)
				if !testenv.Live(t, start, grace, "the retry within the grace") {
					return false
				}
				require.ErrorIs(t, err, inventory.ErrContention)
				require.ErrorContains(t, err, "given up "+grace.String()+" after it was recorded")
				levels(t, m, "a", 10, 0)

				time.Sleep(time.Until(start.Add(grace + 50*time.Millisecond)))
				require.NoError(t, c.call(ctx, m), "the retry takes the abandoned record over")
				levels(t, m, "a", c.a, 0)
				require.ErrorIs(t, c.call(ctx, m), inventory.ErrDuplicate)
				levels(t, m, "a", c.a, 0)
				return true
			})
		})
	}
}

// TestRetryOldRuleStore: over a HoldStore of the rule before (an
// incomplete order abandoned grace after its expiry), a retry past the
// grace still says ErrContention, and one past the TTL and the grace
// takes effect: such a store is slower, not wrong.
func TestRetryOldRuleStore(t *testing.T) {
	ctx := context.Background()
	testenv.TTLRounds(t, 300*time.Millisecond, 5*time.Second, func(grace time.Duration) bool {
		ttl := 2 * grace
		var armed atomic.Bool
		st := newCutStore(oldRuleStore{lockmgrtest.NewMemoryStore(0)}, func(op string) bool {
			return op == "Hold" && armed.CompareAndSwap(true, false)
		})
		m := lockmgr.MustNew(newFakeLocker(0), st, lockmgr.WithAbandonGrace(grace))
		initAll(t, m, 10, "a")

		armed.Store(true)
		start := time.Now()
		require.ErrorIs(t, m.Reserve(ctx, "o", lines("a", 2), ttl), errDown)
		st.up()
		time.Sleep(time.Until(start.Add(grace + 50*time.Millisecond)))
		err := m.Reserve(ctx, "o", lines("a", 2), ttl)
		if !testenv.Live(t, start, ttl+grace, "the retry within the TTL and the grace") {
			return false
		}
		require.ErrorIs(t, err, inventory.ErrContention)
		levels(t, m, "a", 8, 2)

		time.Sleep(time.Until(start.Add(ttl + grace + 50*time.Millisecond)))
		require.NoError(t, m.Reserve(ctx, "o", lines("a", 2), ttl))
		levels(t, m, "a", 8, 2)
		require.NoError(t, m.Confirm(ctx, "o"))
		levels(t, m, "a", 8, 0)
		return true
	})
}

// stalledUnholdStore is a HoldStore whose Unhold, once stall is set,
// hangs until its ctx ends, as on a server that stopped answering.
type stalledUnholdStore struct {
	lockmgr.HoldStore
	stall *atomic.Bool
}

func (s stalledUnholdStore) Unhold(ctx context.Context, sku, id string, sold bool) (int64, error) {
	if s.stall.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.HoldStore.Unhold(ctx, sku, id, sold)
}

// TestGiveBackEndsBeforeAbandon: a Reserve refused on its second line
// gives the first back; when that give-back hangs (the store stopped
// answering), it ends three quarters of the abandon grace after the call
// began, before the order may be abandoned and its id taken over by a
// retry, whose lines a late give-back would otherwise give back. The
// call then says the outcome is unsettled, not that nothing changed, and
// once the grace has passed a retry takes the order over: the units are
// held once.
func TestGiveBackEndsBeforeAbandon(t *testing.T) {
	ctx := context.Background()
	testenv.TTLRounds(t, 400*time.Millisecond, 7*time.Second, func(grace time.Duration) bool {
		stall := new(atomic.Bool)
		st := stalledUnholdStore{HoldStore: lockmgrtest.NewMemoryStore(0), stall: stall}
		m := lockmgr.MustNew(newFakeLocker(0), st, lockmgr.WithAbandonGrace(grace))
		initAll(t, m, 10, "a")
		initAll(t, m, 1, "b")
		stall.Store(true)
		start := time.Now()
		err := m.Reserve(ctx, "o", lines("a", 2, "b", 3), time.Hour)
		took := time.Since(start)
		if !testenv.Live(t, start, grace, "the refused Reserve's return") {
			return false
		}
		require.Error(t, err)
		require.NotErrorIs(t, err, inventory.ErrInsufficientStock, "a refusal would say nothing changed")
		require.ErrorContains(t, err, "giving back what the call held failed")
		require.ErrorContains(t, err, "insufficient stock", "why it gave up")
		require.GreaterOrEqual(t, took, grace*3/4, "the give-back ran until its bound")
		stall.Store(false)
		levels(t, m, "a", 8, 2) // held until the order is given up

		time.Sleep(time.Until(start.Add(grace + 50*time.Millisecond)))
		require.NoError(t, m.Reserve(ctx, "o", lines("a", 2, "b", 1), time.Hour), "a retry takes the abandoned order over")
		levels(t, m, "a", 8, 2) // held once
		levels(t, m, "b", 0, 1)
		return true
	})
}
