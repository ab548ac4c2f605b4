package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/tiered"
)

// fallbackManager returns a tiered Manager over db whose circuit to Redis
// is open for the rest of the run, so that SQL serves every call alone, and
// the SKUs of l, set to MaxStock through a Manager over the real Redis.
// Its tables are dropped when b ends.
func fallbackManager(b *testing.B, s *sqlBench, l layout) (*tiered.Manager, []string) {
	b.Helper()
	ctx := context.Background()
	rdb := testenv.Redis(b)
	tables := testenv.Prefix() + "_"
	up, err := tiered.New(rdb, s.db, tiered.WithPrefix(testenv.RedisPrefix(b, rdb)), tiered.WithTablePrefix(tables))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { up.Close() })
	if err := up.CreateTables(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := s.db.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %[1]sstock, %[1]sgrants, %[1]ssynced, %[1]skeys", tables)); err != nil {
			b.Error(err)
		}
	})
	skus := l.names("fallback")
	for _, sku := range skus {
		if err := up.Init(ctx, sku, inventory.MaxStock); err != nil {
			b.Fatal(err)
		}
	}
	// Port 1 refuses connections: the first call opens the circuit, for
	// an hour.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	b.Cleanup(func() { dead.Close() })
	m, err := tiered.New(dead, s.db, tiered.WithTablePrefix(tables), tiered.WithBreaker(1, time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	if _, err := m.Reduce(ctx, skus[0], 1); err == nil || errors.Is(err, tiered.ErrFallback) {
		b.Fatalf("the first call reached Redis or SQL: %v", err)
	}
	if _, err := m.Reduce(ctx, skus[0], 1); err != nil {
		b.Fatalf("the fallback does not serve: %v", err)
	}
	return m, skus
}

// BenchmarkFallback compares tiered's fallback mode (the circuit to Redis
// open, SQL serving every call alone from its unallotted units) with
// optimistic as shipped, on MariaDB and PostgreSQL, one hot SKU and 64
// spread SKUs at 64 goroutines, one unit per unkeyed call, both over one
// pool of sqlConns connections. Both combine the concurrent calls of a SKU
// into one transaction.
func BenchmarkFallback(b *testing.B) {
	for _, e := range sqltest.Benched {
		if e.Name == "sqlite" {
			continue // tiered has no SQLite statements yet
		}
		b.Run(e.Name, func(b *testing.B) {
			s := openSQL(b, e)
			opt, err := optimistic.New(s.db, optimistic.WithSchema(s.schema))
			if err != nil {
				b.Fatal(err)
			}
			for _, l := range []layout{hot, spread} {
				fb, skus := fallbackManager(b, s, l)
				var gu gaveUp
				strategy := managerSide("tiered, fallback (circuit open), "+s.name, []inventory.StockManager{fb}, skus, &gu)
				baseline := managerSide("optimistic, "+s.name, []inventory.StockManager{opt}, s.skus[l], &gaveUp{})
				calls := fb.Fallbacks()
				benchcmp.Run(b, benchcmp.Case{
					Group:      "tiered fallback",
					Name:       s.name + ", fallback, " + l.name,
					Layout:     l.String(),
					Goroutines: 64,
					Strategy:   strategy,
					Baseline:   baseline,
					Note: func() string {
						n := gu.note()
						if fb.Fallbacks()-calls < gu.calls.Load() {
							n += "; some calls did not go to the fallback"
						}
						return n
					},
				})
			}
		})
	}
}
