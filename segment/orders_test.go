package segment_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/segment"
)

// segments returns the stock of each segment row of sku, in segment order.
func segments(t *testing.T, ctx context.Context, db *sqlx.DB, m *segment.Manager, sku string) []int64 {
	t.Helper()
	q := `"`
	if db.DriverName() == "mysql" {
		q = "`"
	}
	var out []int64
	require.NoError(t, db.SelectContext(ctx, &out, db.Rebind(`SELECT available FROM `+q+m.Table()+q+` WHERE sku = ? ORDER BY seg`), sku))
	return out
}

// requireSpread checks that the segments of sku hold total, spread evenly:
// no two differ by more than one.
func requireSpread(t *testing.T, ctx context.Context, db *sqlx.DB, m *segment.Manager, sku string, total int64) {
	t.Helper()
	segs := segments(t, ctx, db, m, sku)
	require.Len(t, segs, segment.DefaultSegments)
	var sum int64
	for _, n := range segs {
		sum += n
		require.LessOrEqual(t, n, total/int64(len(segs))+1, "segments %v", segs)
		require.GreaterOrEqual(t, n, total/int64(len(segs)), "segments %v", segs)
	}
	require.Equal(t, total, sum, "segments %v", segs)
}

func requireLevels(t *testing.T, ctx context.Context, m *segment.Manager, sku string, available, held int64) {
	t.Helper()
	got, err := m.Get(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, available, got, "available units of %q", sku)
	got, err = m.Held(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, held, got, "held units of %q", sku)
}

// TestOrdersAcrossSegments: a Reserve larger than any segment takes from
// several, all or nothing; a refusal names what the SKU as a whole has;
// Cancel gives the units back spread over the segments; Confirm sells
// them; and the units of an expired hold, all a SKU has left, are sold
// to a Reduce (unkeyed, keyed) or a lines call, not refused.
func TestOrdersAcrossSegments(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, 2*time.Minute)
		s := schema(t, db)
		m := newManager(t, db, s)
		p := testenv.Prefix()
		a, b := p+"-a", p+"-b"
		require.NoError(t, m.Init(ctx, a, 20)) // 3,3,3,3,2,2,2,2
		require.NoError(t, m.Init(ctx, b, 5))
		require.NoError(t, m.Reserve(ctx, p+"-h1", []inventory.Line{{SKU: a, Qty: 19}, {SKU: b, Qty: 5}}, time.Minute))
		requireLevels(t, ctx, m, a, 1, 19)
		requireLevels(t, ctx, m, b, 0, 5)
		requireSpread(t, ctx, db, m, a, 1)

		err := m.Reserve(ctx, p+"-h2", []inventory.Line{{SKU: a, Qty: 2}}, time.Minute)
		var ie *inventory.InsufficientError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, []inventory.Shortfall{{Line: inventory.Line{SKU: a, Qty: 2}, Available: 1}}, ie.Short)
		rem, err := m.Reduce(ctx, a, 1)
		require.NoError(t, err, "the last available unit, in one of eight segments")
		require.Zero(t, rem)

		require.NoError(t, m.Cancel(ctx, p+"-h1"))
		requireLevels(t, ctx, m, a, 19, 0)
		requireLevels(t, ctx, m, b, 5, 0)
		requireSpread(t, ctx, db, m, a, 19)

		require.NoError(t, m.Reserve(ctx, p+"-h3", []inventory.Line{{SKU: a, Qty: 5}}, time.Minute))
		require.NoError(t, m.Confirm(ctx, p+"-h3"))
		requireLevels(t, ctx, m, a, 14, 0)
		requireSpread(t, ctx, db, m, a, 14)

		// Every unit held, then expired: each way of taking them finds them.
		ttl := 50 * time.Millisecond
		for i, take := range []func() error{
			func() error { _, err := m.Reduce(ctx, a, 14); return err },
			func() error { _, err := m.Reduce(ctx, a, 14, inventory.WithKey(p+"-k")); return err },
			func() error { return m.ReduceLines(ctx, []inventory.Line{{SKU: a, Qty: 14}}) },
			func() error { return m.Reserve(ctx, p+"-again", []inventory.Line{{SKU: a, Qty: 14}}, time.Minute) },
		} {
			id := fmt.Sprintf("%s-x%d", p, i)
			require.NoError(t, m.Reserve(ctx, id, []inventory.Line{{SKU: a, Qty: 14}}, ttl))
			requireLevels(t, ctx, m, a, 0, 14)
			time.Sleep(ttl + 50*time.Millisecond)
			require.NoError(t, take(), "take %d: every unit, all of them in an expired hold", i)
			require.ErrorIs(t, m.Confirm(ctx, id), inventory.ErrHoldReleased)
			if i < 3 {
				requireLevels(t, ctx, m, a, 0, 0)
				require.NoError(t, m.Init(ctx, a, 14))
			}
		}
		requireLevels(t, ctx, m, a, 0, 14)

		// One unit in an expired hold, the rest available: a Reduce from
		// one segment does not pass the expired hold by.
		require.NoError(t, m.Init(ctx, b, 20))
		require.NoError(t, m.Reserve(ctx, p+"-y", []inventory.Line{{SKU: b, Qty: 4}}, ttl))
		time.Sleep(ttl + 50*time.Millisecond)
		rem, err = m.Reduce(ctx, b, 1)
		require.NoError(t, err)
		require.EqualValues(t, 19, rem, "the expired hold's units are back before the Reduce takes its own")
		requireLevels(t, ctx, m, b, 19, 0)
		requireSpread(t, ctx, db, m, b, 19)

		_, err = m.Held(ctx, p+"-unknown")
		require.ErrorIs(t, err, inventory.ErrNotFound)
	})
}

// TestOrdersManagers: four Managers, each on its own pool, sell one hot
// SKU of 100 units in 8 segments to 1,200 buyers: a quarter Reserve and
// Confirm, a quarter Reserve and Cancel, a quarter Reduce with a key, a
// quarter ReduceLines with a second SKU. Nothing is oversold, no unit is
// lost or left held (initial - available == sold), and what is left after
// the crowd is sold to one more Reduce: no false sold-out.
func TestOrdersManagers(t *testing.T) {
	for _, e := range sqltest.Engines[:2] { // the server engines: SQLite's file is one pool's
		t.Run(e.Name, func(t *testing.T) {
			ms := fourManagers(t, e)
			ctx := bounded(t, 4*time.Minute)
			p := testenv.Prefix()
			hot, other := p+"-hot", p+"-other"
			const stock, buyers = 100, 1200
			require.NoError(t, ms[0].Init(ctx, hot, stock))
			require.NoError(t, ms[0].Init(ctx, other, buyers))
			var mu sync.Mutex
			var sold, otherSold int
			var contention contended
			retry := func(fn func() error) error { return contention.do(ctx, fn) }
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					m, id := ms[i%4], fmt.Sprintf("%s-buyer-%d", p, i)
					one := []inventory.Line{{SKU: hot, Qty: 1}}
					var err error
					n, o := 0, 0
					switch i % 4 {
					case 0, 1:
						err = retry(func() error { return m.Reserve(ctx, id, one, time.Minute) })
						if err == nil && i%4 == 0 {
							err, n = retry(func() error { return ms[(i+1)%4].Confirm(ctx, id) }), 1
						} else if err == nil {
							err = retry(func() error { return ms[(i+1)%4].Cancel(ctx, id) })
						}
					case 2:
						err = retry(func() error { _, err := m.Reduce(ctx, hot, 1, inventory.WithKey(id)); return err })
						n = 1
					default:
						err = retry(func() error {
							return m.ReduceLines(ctx, []inventory.Line{{SKU: other, Qty: 1}, {SKU: hot, Qty: 1}}, inventory.WithKey(id))
						})
						n, o = 1, 1
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						sold, otherSold = sold+n, otherSold+o
					case !errors.Is(err, inventory.ErrInsufficientStock):
						t.Errorf("buyer %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			left, err := ms[3].Get(ctx, hot)
			require.NoError(t, err)
			t.Logf("sold %d, left %d, %d ErrContention retries", sold, left, contention.n.Load())
			require.EqualValues(t, stock-sold, left, "initial - available == sold")
			requireLevels(t, ctx, ms[2], hot, left, 0)
			requireLevels(t, ctx, ms[1], other, int64(buyers-otherSold), 0)
			if left > 0 {
				rem, err := ms[0].Reduce(ctx, hot, left)
				require.NoError(t, err, "the %d units left are sold to one Reduce", left)
				require.Zero(t, rem)
			}
		})
	}
}
