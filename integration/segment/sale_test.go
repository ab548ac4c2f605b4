//go:build !race

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
	"github.com/stockkit/inventory/sqlstore"
)

// TestSale sells 100 units of one SKU in 8 segments to 10,000 buyers at
// once, through four Managers on pools of their own (as four processes),
// on MariaDB and PostgreSQL: a quarter of the buyers Reserve a unit and
// Confirm it through another Manager, a quarter Reduce with a key, the
// rest Reduce without one. Exactly 100 units are sold, the last one
// included (the stock ends at 0, nothing held), and every other buyer is
// refused with ErrInsufficientStock. Without -race: the race detector dies
// past 8,128 goroutines.
func TestSale(t *testing.T) {
	const stock, buyers, managers, conns = 100, 10_000, 4, 8
	for _, e := range sqltest.Engines[:2] {
		t.Run(e.Name, func(t *testing.T) {
			ms := make([]*segment.Manager, managers)
			var s sqlstore.Schema
			for i := range ms {
				db := e.Open(t)
				db.SetMaxOpenConns(conns) // 32 connections in all: the servers are shared
				db.SetMaxIdleConns(conns)
				if i == 0 {
					s = schema(t, db)
				}
				var err error
				ms[i], err = segment.New(db, segment.WithSchema(s))
				require.NoError(t, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			sku := testenv.Prefix()
			require.NoError(t, ms[0].Init(ctx, sku, stock))

			var mu sync.Mutex
			var sold, refused, contention int
			var odd []error
			retry := func(fn func() error) error {
				for {
					err := fn()
					if !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
						return err
					}
					mu.Lock()
					contention++
					mu.Unlock()
				}
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					m, id := ms[i%managers], fmt.Sprintf("%s-buyer-%d", sku, i)
					<-start
					var err error
					switch i % 4 {
					case 0:
						err = retry(func() error { return m.Reserve(ctx, id, []inventory.Line{{SKU: sku, Qty: 1}}, time.Minute) })
						if err == nil {
							err = retry(func() error { return ms[(i+1)%managers].Confirm(ctx, id) })
						}
					case 1:
						err = retry(func() error { _, err := m.Reduce(ctx, sku, 1, inventory.WithKey(id)); return err })
					default:
						err = retry(func() error { _, err := m.Reduce(ctx, sku, 1); return err })
					}
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						sold++
					case errors.Is(err, inventory.ErrInsufficientStock):
						refused++
					default:
						odd = append(odd, fmt.Errorf("buyer %d: %w", i, err))
					}
				})
			}
			began := time.Now()
			close(start)
			wg.Wait()
			took := time.Since(began)
			t.Logf("%d buyers in %v: sold %d, refused %d, %d ErrContention retries", buyers, took.Round(time.Millisecond), sold, refused, contention)
			require.Empty(t, odd)
			require.Equal(t, stock, sold, "exactly the stock is sold")
			require.Equal(t, buyers-stock, refused)
			left, err := ms[3].Get(ctx, sku)
			require.NoError(t, err)
			require.Zero(t, left, "the last unit is sold")
			held, err := ms[2].Held(ctx, sku)
			require.NoError(t, err)
			require.Zero(t, held, "every hold was confirmed")
		})
	}
}

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
