package rowlock_test

import (
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// BenchmarkOrders measures Reserve+Confirm and a 3-line ReduceLines as
// ratios to a single-SKU Reduce in the same run, on every engine, at 1 and
// 16 goroutines (go test -run '^$' -bench Orders -benchtime 1x).
func BenchmarkOrders(b *testing.B) {
	sqltest.BenchEngines(b, func(b testing.TB, db *sqlx.DB, s sqlstore.Schema) *rowlock.Manager { return newManager(b, db, s) })
}
