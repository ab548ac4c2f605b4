package redislock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/lockbench"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
)

// naiveLock is the baseline lock: SET NX PX with a random token, retried
// every millisecond, released by a token-checked script.
type naiveLock struct {
	c            redis.UniversalClient
	prefix       string
	tries, fails atomic.Int64
}

var naiveRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (l *naiveLock) lock(ctx context.Context, sku string) (unlock func(), err error) {
	key, token := redislock.LockKey(l.prefix, sku), rand.Text()
	for {
		l.tries.Add(1)
		ok, err := l.c.SetNX(ctx, key, token, 5*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() { naiveRelease.Run(context.WithoutCancel(ctx), l.c, []string{key}, token) }, nil
		}
		l.fails.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkReduce measures protected decrements per second: one hot SKU or
// 256 spread SKUs, on 1, 16 and 64 goroutines sharing one Manager, or
// (procs) each with its own Manager as separate processes would. Beside it,
// in the same run, the baseline: a bare SET-NX lock with 1ms retry, read,
// write, unlock on the same data. Metrics: ops/s, ratio (library/baseline
// ops/s), lock-wait p50/p99 of both, and the baseline's failed lock tries.
func BenchmarkReduce(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) (redis.UniversalClient, lockbench.Backend)
	}{
		{"redis", func(b *testing.B) (redis.UniversalClient, lockbench.Backend) {
			c := testenv.Redis(b)
			return c, lockbench.Redis(b, c)
		}},
		{"cluster", func(b *testing.B) (redis.UniversalClient, lockbench.Backend) {
			c := testenv.RedisCluster(b)
			return c, lockbench.Redis(b, c)
		}},
	}
	for _, e := range sqltest.Engines {
		stores = append(stores, struct {
			name string
			open func(b *testing.B) (redis.UniversalClient, lockbench.Backend)
		}{e.Name, func(b *testing.B) (redis.UniversalClient, lockbench.Backend) {
			return testenv.Redis(b), lockbench.SQL(b, e.Open(b))
		}})
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			c, bs := st.open(b)
			skus := make([]string, 256)
			for i := range skus {
				skus[i] = "sku-" + strconv.Itoa(i)
				if err := bs.Store.Init(ctx, skus[i], inventory.MaxStock/2); err != nil {
					b.Fatal(err)
				}
			}
			for _, mode := range []string{"hot", "spread", "hot-procs"} {
				for _, g := range []int{1, 16, 64} {
					b.Run(fmt.Sprintf("%s/g=%d", mode, g), func(b *testing.B) {
						pick := func(*mrand.Rand) string { return skus[0] }
						if mode == "spread" {
							pick = func(r *mrand.Rand) string { return skus[r.IntN(len(skus))] }
						}
						benchReduce(b, c, bs, g, mode == "hot-procs", pick)
					})
				}
			}
		})
	}
}

func benchReduce(b *testing.B, c redis.UniversalClient, bs lockbench.Backend, g int, procs bool, pick func(*mrand.Rand) string) {
	ctx := context.Background()
	prefix := lockPrefix(b, c)
	var lw lockbench.Waits
	managers := make([]*lockmgr.Manager, 1)
	if procs {
		managers = make([]*lockmgr.Manager, g)
	}
	for i := range managers {
		l, err := redislock.NewLocker(c, redislock.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		if managers[i], err = lockmgr.NewManager(lockbench.TimedLocker{Locker: l, W: &lw}, bs.Store); err != nil {
			b.Fatal(err)
		}
	}
	var m atomic.Int64
	libOp := func(rng *mrand.Rand) error {
		_, err := managers[m.Add(1)%int64(len(managers))].Reduce(ctx, pick(rng), 1)
		return err
	}
	var bw lockbench.Waits
	nl := &naiveLock{c: c, prefix: prefix}
	baseOp := func(rng *mrand.Rand) error {
		sku := pick(rng)
		start := time.Now()
		unlock, err := nl.lock(ctx, sku)
		if err != nil {
			return err
		}
		bw.Add(time.Since(start))
		defer unlock()
		n, err := bs.Read(ctx, sku)
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("baseline ran out of stock")
		}
		return bs.Write(ctx, sku, n-1)
	}

	lockbench.Compare(b, g, libOp, baseOp, &lw, &bw, func() {
		nl.tries.Store(0)
		nl.fails.Store(0)
	})
	b.ReportMetric(100*float64(nl.fails.Load())/float64(max(nl.tries.Load(), 1)), "base-fail-%")
}
