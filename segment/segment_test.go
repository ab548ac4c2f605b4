package segment_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/segment"
	"github.com/stockkit/inventory/sqlstore"
)

// schema returns tables of the test's own, the segments table created
// and, with the others, dropped at the end of t.
func schema(t testing.TB, db *sqlx.DB) sqlstore.Schema {
	t.Helper()
	s := sqltest.Schema(t, db)
	m, err := segment.New(db, segment.WithSchema(s))
	require.NoError(t, err)
	require.NoError(t, m.CreateTables(context.Background()))
	sqltest.Drop(t, db, m.Table())
	return s
}

// harness returns the schema of the suite's subtest t: shared, or tables
// of its own for the order subtests (see sqltest.Harness), whose
// segments table it creates and drops too.
func harness(t *testing.T, db *sqlx.DB, shared sqlstore.Schema) sqlstore.Schema {
	if !strings.Contains(t.Name(), "/Orders/") {
		return shared
	}
	return schema(t, db)
}

func newManager(t testing.TB, db *sqlx.DB, s sqlstore.Schema, opts ...segment.Option) *segment.Manager {
	t.Helper()
	m, err := segment.New(db, append([]segment.Option{segment.WithSchema(s)}, opts...)...)
	require.NoError(t, err)
	return m
}

func bounded(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestConformance runs the public suite, its order subtests included,
// with 8 segments (the flash sale sells 100 units to 2,000 keyed buyers,
// the last unit included) on every engine, and with one segment, where
// the remaining value is linearizable, on PostgreSQL.
func TestConformance(t *testing.T) {
	for _, n := range []int{segment.DefaultSegments, 1} {
		t.Run(fmt.Sprintf("segments=%d", n), func(t *testing.T) {
			sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
				if n == 1 && db.DriverName() != "pgx" {
					return // one engine is enough for the degenerate layout
				}
				s := schema(t, db)
				inventorytest.Run(t, inventorytest.Config{
					RemainingNotLinearizable: n > 1,
					RequireOrders:            true,
					Timeout:                  5 * time.Minute,
					NewManager: func(t *testing.T) inventory.StockManager {
						return newManager(t, db, harness(t, db, s), segment.WithSegments(n))
					},
				})
			})
		})
	}
}

// TestNoFalseSoldOut: with a unit in each segment, and with the stock
// spread thinner than a Reduce, every Reduce the SKU as a whole can fit
// succeeds, one larger than any segment takes from several, and a refusal
// carries the exact stock.
func TestNoFalseSoldOut(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		s := schema(t, db)
		m := newManager(t, db, s)
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 8))
		for i := range 8 {
			rem, err := m.Reduce(ctx, sku, 1)
			require.NoError(t, err, "unit %d of 8", i+1)
			require.EqualValues(t, 7-i, rem)
		}
		rem, err := m.Reduce(ctx, sku, 1)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
		require.Zero(t, rem)

		sellThin(t, ctx, m, sku)

		// An Init with fewer segments leaves none of the old ones behind.
		require.NoError(t, m.Init(ctx, sku, 100))
		require.NoError(t, newManager(t, db, s, segment.WithSegments(3)).Init(ctx, sku, 9))
		got, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 9, got)
		rem, err = m.Reduce(ctx, sku, 9) // this Manager has 8: the SKU path reaches the 3
		require.NoError(t, err)
		require.Zero(t, rem)
	})
}

// TestManagers: four Managers, each on its own pool as four processes
// would be, sell 100 units to 2,000 keyed buyers, and every buyer repeats
// its call through another Manager, which lands on another segment: the
// repeat is a duplicate of a sale or a refusal, never a second sale.
func TestManagers(t *testing.T) {
	for _, e := range sqltest.Engines[:2] { // the server engines: SQLite's file is one pool's
		t.Run(e.Name, func(t *testing.T) {
			ms := fourManagers(t, e)
			ctx := bounded(t, 3*time.Minute)
			sku := testenv.Prefix()
			const stock, buyers = 100, 2000
			require.NoError(t, ms[0].Init(ctx, sku, stock))
			var mu sync.Mutex
			var sold, dups, refused int
			var wg sync.WaitGroup
			var contention contended
			call := func(m *segment.Manager, key string) error {
				return contention.do(ctx, func() error {
					_, err := m.Reduce(ctx, sku, 1, inventory.WithKey(key))
					return err
				})
			}
			for i := range buyers {
				wg.Go(func() {
					key := fmt.Sprint("buyer-", i)
					first := call(ms[i%4], key)
					again := call(ms[(i+1)%4], key)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case first == nil:
						sold++
						if errors.Is(again, inventory.ErrDuplicate) {
							dups++
						} else {
							t.Errorf("buyer %d bought, and its repeat through another Manager returned %v, not ErrDuplicate", i, again)
						}
					case errors.Is(first, inventory.ErrInsufficientStock):
						refused++
						if again == nil {
							sold++
						} else if !errors.Is(again, inventory.ErrInsufficientStock) {
							t.Errorf("buyer %d: repeat after a refusal: %v", i, again)
						}
					default:
						t.Errorf("buyer %d: %v", i, first)
					}
				})
			}
			wg.Wait()
			t.Logf("sold %d, %d repeats told ErrDuplicate, %d refused, %d ErrContention retries", sold, dups, refused, contention.n.Load())
			got, err := ms[3].Get(ctx, sku)
			require.NoError(t, err)
			require.Equal(t, stock, sold, "exactly the stock is sold")
			require.Zero(t, got, "the last unit is sold")
		})
	}
}

// fourManagers returns four Managers over tables of the test's own on
// engine e, each on a pool of its own, as four processes would be.
func fourManagers(t *testing.T, e sqltest.Engine) []*segment.Manager {
	db := e.Open(t)
	s := schema(t, db)
	ms := []*segment.Manager{newManager(t, db, s)}
	for range 3 {
		ms = append(ms, newManager(t, e.Open(t), s))
	}
	return ms
}

// contended runs calls again while they fail with ErrContention, as a
// client should, and counts those retries.
type contended struct{ n atomic.Int64 }

func (c *contended) do(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
			return err
		}
		c.n.Add(1)
	}
}

// TestOptionsRule checks the options rule of the root package.
func TestOptionsRule(t *testing.T) {
	db := sqlx.NewDb(nil, "mysql")
	optiontest.Run(t, map[string]segment.Option{
		"segments":     segment.WithSegments(1),
		"max segments": segment.WithSegments(segment.MaxSegments),
		"key TTL":      segment.WithKeyTTL(time.Second),
		"schema":       segment.WithSchema(sqlstore.Schema{Table: "s"}),
		"sweep limit":  segment.WithSweepLimit(1),
	}, map[string]segment.Option{
		"zero segments":     segment.WithSegments(0),
		"too many segments": segment.WithSegments(segment.MaxSegments + 1),
		"zero key TTL":      segment.WithKeyTTL(0),
		"injected table":    segment.WithSchema(sqlstore.Schema{Table: "x; DROP TABLE y"}),
		"zero sweep limit":  segment.WithSweepLimit(0),
	}, func(o segment.Option) (any, error) { return segment.New(db, o) })
	_, err := segment.New(sqlx.NewDb(nil, "oracle"))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = segment.New(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}
