package tiered

import (
	"context"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
)

// FuzzManager runs the suite's fuzz target (random calls checked against
// the reference manager) on Redis + SQLite, orders included.
func FuzzManager(f *testing.F) {
	rdb, db := testenv.Redis(f), testenv.SQLite(f)
	m, err := New(rdb, db, WithPrefix(testenv.RedisPrefix(f, rdb)), WithTablePrefix(testenv.Prefix()+"_"), WithChunk(4), WithLowWater(1))
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.CreateTables(ctx); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		m.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.dropTables(ctx); err != nil {
			f.Error(err)
		}
	})
	inventorytest.Fuzz(f, m)
}
