package rowlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
)

// BenchmarkOrders measures Reserve+Confirm and a 3-line ReduceLines as
// ratios to a single-SKU Reduce in the same run, on every engine, at 1 and
// 16 goroutines (go test -run '^$' -bench Orders -benchtime 1x).
func BenchmarkOrders(b *testing.B) {
	for _, e := range sqltest.Engines {
		b.Run(e.Name, func(b *testing.B) {
			db := e.Open(b)
			m := newManager(b, db, sqltest.Schema(b, db))
			for _, g := range []int{1, 16} {
				b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) { sqltest.BenchOrders(b, m, g, 5, time.Second) })
			}
		})
	}
}
