package redislock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redislock"
)

// BenchmarkOrders measures Reserve+Confirm and a 3-line ReduceLines as
// ratios to a single-SKU Reduce of the same Manager in the same run, over
// each store (Redis, the Cluster, MariaDB, PostgreSQL; the lock in Redis),
// at 1 and 16 goroutines:
//
//	go test -run '^$' -bench Orders -benchtime 1x ./redislock/
//
// Each line of an order call is locked and written on its own, and the
// order record costs steps of its own. See sqltest.BenchOrders for the
// rounds and the figures reported.
func BenchmarkOrders(b *testing.B) {
	type backend struct {
		name string
		open func(b *testing.B) (redis.UniversalClient, redislock.Store)
	}
	bs := []backend{
		{"redis", func(b *testing.B) (redis.UniversalClient, redislock.Store) {
			c := testenv.Redis(b)
			return c, storetest.Redis(b, c)
		}},
		{"cluster", func(b *testing.B) (redis.UniversalClient, redislock.Store) {
			c := testenv.RedisCluster(b)
			return c, storetest.Redis(b, c)
		}},
	}
	for _, e := range sqltest.Benched {
		if e.Name == "sqlite" {
			continue // it needs the overlay, and the lock strategies do not run on it
		}
		bs = append(bs, backend{e.Name, func(b *testing.B) (redis.UniversalClient, redislock.Store) {
			return testenv.Redis(b), storetest.SQL(b, e.Open(b))
		}})
	}
	for _, be := range bs {
		b.Run(be.name, func(b *testing.B) {
			c, s := be.open(b)
			for _, g := range []int{1, 16} {
				b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
					m, err := redislock.New(c, s, redislock.WithPrefix(lockPrefix(b, c)))
					if err != nil {
						b.Fatal(err)
					}
					sqltest.BenchOrders(b, m, g, 5, time.Second)
				})
			}
		})
	}
}
