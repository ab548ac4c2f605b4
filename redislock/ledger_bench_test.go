package redislock_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/redisledger"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// BenchmarkLedger is the price of the movement ledger kept through the
// store: redislock over a store WithLedger against one without, on one hot
// SKU each, 8 goroutines, 10 rounds of 1 s alternating which side runs
// first; it reports the median ratio of ops/s on/off with the min and max
// of the rounds, and the load average. Run it alone, without -race:
//
//	go test -run '^$' -bench BenchmarkLedger -benchtime 1x ./redislock
func BenchmarkLedger(b *testing.B) {
	type side struct {
		m   *redislock.Manager
		sku string
	}
	backends := []struct {
		name string
		open func(b *testing.B, c redis.UniversalClient, on bool) redislock.Store
	}{{"redis", func(b *testing.B, c redis.UniversalClient, on bool) redislock.Store {
		var opts []redisstore.Option
		if on {
			opts = append(opts, redisstore.WithLedger(0))
		}
		s, err := redisstore.New(c, append(opts, redisstore.WithPrefix(testenv.RedisPrefix(b, c)))...)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}}}
	for _, e := range sqltest.Benched {
		backends = append(backends, struct {
			name string
			open func(b *testing.B, c redis.UniversalClient, on bool) redislock.Store
		}{e.Name, func(b *testing.B, _ redis.UniversalClient, on bool) redislock.Store {
			db := e.Open(b)
			opts := []sqlstore.Option{sqlstore.WithSchema(sqltest.Schema(b, db))}
			if on {
				opts = append(opts, sqlstore.WithLedger())
			}
			s, err := sqlstore.New(db, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.CreateTables(context.Background()); err != nil {
				b.Fatal(err)
			}
			return s
		}})
	}
	for _, be := range backends {
		for _, keyed := range []bool{false, true} {
			name := be.name + "/unkeyed"
			if keyed {
				name = be.name + "/keyed"
			}
			b.Run(name, func(b *testing.B) {
				c := testenv.Redis(b)
				var sides [2]side // off, on
				for i := range sides {
					m, err := redislock.New(c, be.open(b, c, i == 1), redislock.WithPrefix(lockPrefix(b, c)))
					if err != nil {
						b.Fatal(err)
					}
					sides[i] = side{m, fmt.Sprint(testenv.Prefix(), "-hot-", i)}
					if err := m.Init(context.Background(), sides[i].sku, inventory.MaxStock); err != nil {
						b.Fatal(err)
					}
				}
				var ratios []float64
				var n atomic.Int64
				for r := range 10 {
					var ops [2]float64
					for j := range 2 {
						i := (r + j) % 2 // who goes first alternates
						ops[i] = hammer(b, sides[i].m, sides[i].sku, keyed, &n, 8, time.Second)
					}
					ratios = append(ratios, ops[1]/ops[0])
				}
				slices.Sort(ratios)
				med := (ratios[4] + ratios[5]) / 2
				b.ReportMetric(med, "on/off")
				b.Logf("ledger on/off, ops/s: median %.2f (%.2f..%.2f) over 10 rounds; load average %s", med, ratios[0], ratios[9], load())
			})
		}
	}
}

// hammer runs Reduces of 1 on sku from g goroutines for d and returns the
// ops/s.
func hammer(b *testing.B, m *redislock.Manager, sku string, keyed bool, n *atomic.Int64, g int, d time.Duration) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			for ctx.Err() == nil {
				opts := []inventory.Option{inventory.WithRef("bench")}
				if keyed {
					opts = append(opts, inventory.WithKey(fmt.Sprint("k-", n.Add(1))))
				}
				_, err := m.Reduce(ctx, sku, 1, opts...)
				switch {
				case err == nil:
					done.Add(1)
				case ctx.Err() == nil:
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds()
}

// load is the load average, as uptime says it.
func load() string {
	s, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(s))[:3], " ")
}

// BenchmarkLedgerBytes measures the Redis memory of redisstore's stream
// per entry: 20,000 keyed Reduces through redislock (a 24-byte SKU, a
// 20-byte key and a 16-byte reference), each its own stream entry (a lock
// strategy does not merge calls); MEMORY USAGE ... SAMPLES 0 of the
// stream over its entries.
func BenchmarkLedgerBytes(b *testing.B) {
	const entries = 20_000
	ctx := context.Background()
	c := testenv.Redis(b)
	prefix := testenv.RedisPrefix(b, c)
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithLedger(0))
	if err != nil {
		b.Fatal(err)
	}
	m, err := redislock.New(c, s, redislock.WithPrefix(lockPrefix(b, c)))
	if err != nil {
		b.Fatal(err)
	}
	for _, keyed := range []bool{true, false} {
		sku, name := fmt.Sprintf("ledger-bytes-%011d", 0), "keyed, with a reference"
		if !keyed {
			sku, name = fmt.Sprintf("ledger-bytes-%011d", 1), "unkeyed, no reference"
		}
		b.Run(name, func(b *testing.B) {
			if err := m.Init(ctx, sku, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Go(func() {
					for i := w; i < entries-1; i += 16 {
						var opts []inventory.Option
						if keyed {
							opts = []inventory.Option{inventory.WithKey(fmt.Sprintf("buyer-%014d", i)), inventory.WithRef(fmt.Sprintf("order-%010d", i))}
						}
						if _, err := m.Reduce(ctx, sku, 1, opts...); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			es := 0
			for _, err := range ledger.History(ctx, m, sku, 0) {
				if err != nil {
					b.Fatal(err)
				}
				es++
			}
			if es != entries {
				b.Fatalf("%d entries, want %d", es, entries)
			}
			bytes, err := c.MemoryUsage(ctx, redisledger.Stream(rediskeys.Stock(prefix, sku)), 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(bytes)/entries, "B/entry")
			b.Logf("%s: %d bytes for %d entries, %.0f B/entry", name, bytes, entries, float64(bytes)/entries)
		})
	}
}
