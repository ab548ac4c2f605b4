package rowlock_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

type manager struct{ *rowlock.Manager }

func (m manager) Take(ctx context.Context, sku string) error {
	_, err := m.Reduce(ctx, sku, 1)
	return err
}

// BenchmarkReduce measures rowlock per engine, layout and concurrency,
// beside the bare conditional UPDATE as baseline.
func BenchmarkReduce(b *testing.B) {
	sqltest.Bench(b, sqltest.Variant{Name: "rowlock", New: func(tb testing.TB, db *sqlx.DB, schema sqlstore.Schema) sqltest.Taker {
		return manager{newManager(tb, db, schema)}
	}})
}
