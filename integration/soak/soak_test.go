//go:build soak

// Package soak runs every strategy for minutes on the real servers of
// `make services`: waves of thousands of buyers on several SKUs, with
// refunds, checking after each wave that nothing was oversold or lost, and
// that memory and goroutines stay flat. Run it with `make soak`;
// SOAK_DURATION sets the time per strategy (default 3m).
package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/zklock"
)

const keyTTL = 10 * time.Minute

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tables creates a fresh stock table and ledger, dropped when t ends.
func tables(t *testing.T, db *sqlx.DB) sqlstore.Schema {
	p := testenv.Prefix()
	schema := sqlstore.Schema{Table: "soak_" + p, Ledger: "soak_ledger_" + p}
	s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	must(t, err)
	must(t, s.CreateTables(context.Background()))
	t.Cleanup(func() {
		db.Exec("DROP TABLE " + schema.Table)
		db.Exec("DROP TABLE " + schema.Ledger)
		db.Exec("DROP TABLE " + schema.Table + "_holds")  // CreateTables' default holds table
		db.Exec("DROP TABLE " + schema.Table + "_orders") // and orders table
	})
	return schema
}

func redisStore(t *testing.T) *redisstore.Store {
	c := testenv.Redis(t)
	s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)), redisstore.WithKeyTTL(keyTTL))
	must(t, err)
	return s
}

var strategies = []struct {
	name string
	make func(t *testing.T) (inventory.StockManager, error)
}{
	{"luascript", func(t *testing.T) (inventory.StockManager, error) {
		c := testenv.Redis(t)
		return luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)), luascript.WithKeyTTL(keyTTL))
	}},
	{"optimistic/mariadb", func(t *testing.T) (inventory.StockManager, error) {
		db := testenv.MySQL(t)
		return optimistic.New(db, optimistic.WithSchema(tables(t, db)), optimistic.WithKeyTTL(keyTTL))
	}},
	{"rowlock/postgres", func(t *testing.T) (inventory.StockManager, error) {
		db := testenv.Postgres(t)
		return rowlock.New(db, rowlock.WithSchema(tables(t, db)), rowlock.WithKeyTTL(keyTTL))
	}},
	{"redislock/redis", func(t *testing.T) (inventory.StockManager, error) {
		c := testenv.Redis(t)
		return redislock.New(c, redisStore(t), redislock.WithPrefix(testenv.RedisPrefix(t, c)))
	}},
	{"redlock/redis", func(t *testing.T) (inventory.StockManager, error) {
		var nodes []redis.UniversalClient
		for _, c := range testenv.RedlockClients(t) {
			nodes = append(nodes, c)
		}
		p := testenv.RedisPrefix(t, nodes[0]) + ":redlock:"
		for _, c := range nodes[1:] {
			t.Cleanup(func() { testenv.DeleteKeys(t, c, p+"*") })
		}
		return redlock.New(nodes, redisStore(t), redlock.WithPrefix(p))
	}},
	{"zklock/redis", func(t *testing.T) (inventory.StockManager, error) {
		c := testenv.ZooKeeper(t)
		top := "/" + testenv.Prefix()
		t.Cleanup(func() {
			// zklock removes each SKU's directory; its root remains.
			for _, p := range []string{top + "/locks", top} {
				if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
					t.Errorf("delete znode %s: %v", p, err)
				}
			}
		})
		return zklock.New(c, redisStore(t), zklock.WithRoot(top+"/locks"))
	}},
}

func TestSoak(t *testing.T) {
	d := 3 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		must(t, err)
	}
	for _, s := range strategies {
		t.Run(s.name, func(t *testing.T) {
			m, err := s.make(t)
			must(t, err)
			soak(t, m, d)
		})
	}
}

// soak sells waves of 5,000 buyers on 8 SKUs of 200 units each, every 10th
// buyer refunding, until d has passed; after each wave it checks every SKU's
// invariant and samples heap and goroutines.
func soak(t *testing.T, m inventory.StockManager, d time.Duration) {
	const skus, stock, buyers, inflight = 8, 200, 5000, 128
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	var heap0 uint64
	g0 := 0
	end := time.Now().Add(d)
	total, waves := 0, 0
	for wave := 0; time.Now().Before(end); wave++ {
		names := make([]string, skus)
		taken := make([]int64, skus)
		returned := make([]int64, skus)
		var mu sync.Mutex
		for i := range names {
			names[i] = fmt.Sprintf("soak-%d-%d", wave, i)
			must(t, m.Init(ctx, names[i], stock))
		}
		sem := make(chan struct{}, inflight)
		var wg sync.WaitGroup
		var unexpected []error
		t0 := time.Now()
		for b := range buyers {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				k := rand.IntN(skus)
				key := inventory.WithKey(fmt.Sprint("w", wave, "b", b))
				var err error
				for range 50 {
					if _, err = m.Reduce(ctx, names[k], 1, key); !errors.Is(err, inventory.ErrContention) {
						break
					}
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					taken[k]++
				case errors.Is(err, inventory.ErrInsufficientStock):
					return
				default:
					unexpected = append(unexpected, err)
					return
				}
				if b%10 == 0 {
					mu.Unlock()
					for range 50 {
						if _, err = m.Return(ctx, names[k], 1, key); !errors.Is(err, inventory.ErrContention) {
							break
						}
					}
					mu.Lock()
					if err == nil {
						returned[k]++
					} else {
						unexpected = append(unexpected, err)
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(t0)
		if len(unexpected) > 0 {
			t.Fatalf("wave %d: %d unexpected errors; first: %v", wave, len(unexpected), unexpected[0])
		}
		for i, name := range names {
			left, err := m.Get(ctx, name)
			must(t, err)
			if left < 0 || stock-left != taken[i]-returned[i] {
				t.Fatalf("wave %d %s: initial %d, left %d, taken %d, returned %d", wave, name, stock, left, taken[i], returned[i])
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		g := runtime.NumGoroutine()
		if wave == 1 { // after one wave of warm-up: pools filled, scripts loaded
			heap0, g0 = ms.HeapAlloc, g
		}
		total += buyers
		waves++
		if wave%5 == 0 || !time.Now().Add(elapsed).Before(end) {
			t.Logf("wave %d: %d buyers in %v (%.0f/s); heap %d KiB, %d goroutines", wave, buyers, elapsed.Round(time.Millisecond),
				float64(buyers)/elapsed.Seconds(), ms.HeapAlloc/1024, g)
		}
		if wave > 1 && (ms.HeapAlloc > 2*heap0+16<<20 || g > g0+20) {
			t.Fatalf("wave %d: heap %d KiB (after warm-up %d KiB), goroutines %d (after warm-up %d): growing", wave, ms.HeapAlloc/1024, heap0/1024, g, g0)
		}
	}
	t.Logf("%d waves, %d buyers, invariant exact on every SKU of every wave; heap after warm-up %d KiB, goroutines %d", waves, total, heap0/1024, g0)
}
