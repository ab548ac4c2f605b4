package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stockkit/inventory/integration/internal/sqlfault"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/sqlstore"
)

// casManager moves stock as the lock strategies do, minus the lock: Read,
// then CompareAndSet, again until it wins. It is the Store methods under
// test, as a StockManager for sqlfault.Stall.
type casManager struct{ *sqlstore.Store }

func (m casManager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, -qty, driver.DirReduce, opts)
}

func (m casManager) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, driver.DirReturn, opts)
}

func (m casManager) move(ctx context.Context, sku string, delta int64, dir driver.Direction, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, max(delta, -delta), opts)
	if err != nil {
		return 0, err
	}
	for {
		stock, version, err := m.Read(ctx, sku)
		if err != nil {
			return 0, err
		}
		ok, err := m.CompareAndSet(ctx, sku, version, stock+delta, dir, o.Key)
		if err != nil || ok {
			return stock + delta, err
		}
	}
}

// TestStalledServer: while the server hangs, Get, Read and CompareAndSet
// (with and without a key) return within their deadline plus
// inventory.DeadlineSlack, and what they wrote is applied at most once, as
// the keyed retries show.
func TestStalledServer(t *testing.T) {
	sqlfault.Stall(t, "sqlstore", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager {
		s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
		require.NoError(t, err)
		return casManager{s}
	})
}
