package redlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/lockbench"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redlock"
)

// bareRedlock is the baseline lock: SET NX PX with a random token on every
// node at once, held on a majority, else undone and retried after 1ms;
// released by a token-checked DEL on every node.
type bareRedlock struct {
	nodes        []redis.UniversalClient
	prefix       string
	tries, fails atomic.Int64
}

var bareRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// all runs f on every node at once and counts the successes.
func (l *bareRedlock) all(f func(c redis.UniversalClient) bool) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, c := range l.nodes {
		wg.Go(func() {
			if f(c) {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

func (l *bareRedlock) lock(ctx context.Context, sku string) (unlock func()) {
	key, token := l.prefix+sku, rand.Text()
	release := func() {
		l.all(func(c redis.UniversalClient) bool {
			return bareRelease.Run(context.WithoutCancel(ctx), c, []string{key}, token).Err() == nil
		})
	}
	for {
		l.tries.Add(1)
		n := l.all(func(c redis.UniversalClient) bool {
			ok, err := c.SetNX(ctx, key, token, redlock.DefaultExpiry).Result()
			return ok && err == nil
		})
		if n > len(l.nodes)/2 {
			return release
		}
		release()
		l.fails.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkReduce measures protected decrements per second: one hot SKU or
// 256 spread SKUs, on 1, 16 and 64 goroutines sharing one Manager, or
// (hot-procs) each with its own Manager as separate processes would. Beside
// it, in the same run, the baseline: a bare Redlock (SET NX PX on the three
// nodes, 1ms retry), read, write and token-checked DEL on the same data.
// Metrics: ops/s, ratio (library/baseline ops/s), lock-wait p50/p99 of both,
// and the baseline's failed lock tries.
func BenchmarkReduce(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) lockbench.Backend
	}{
		{"redis", func(b *testing.B) lockbench.Backend { return lockbench.Redis(b, testenv.Redis(b)) }},
		{"mariadb", func(b *testing.B) lockbench.Backend { return lockbench.SQL(b, sqltest.Engines[0].Open(b)) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			bs := st.open(b)
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
						benchReduce(b, bs, g, mode == "hot-procs", pick)
					})
				}
			}
		})
	}
}

func benchReduce(b *testing.B, bs lockbench.Backend, g int, procs bool, pick func(*mrand.Rand) string) {
	ctx := context.Background()
	clients := nodes(b)
	prefix := lockPrefix(b, clients)
	var lw lockbench.Waits
	managers := make([]*lockmgr.Manager, 1)
	if procs {
		managers = make([]*lockmgr.Manager, g)
	}
	for i := range managers {
		l, err := redlock.NewLocker(clients, redlock.WithPrefix(prefix))
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
	bl := &bareRedlock{nodes: clients, prefix: prefix + "bare:"}
	baseOp := func(rng *mrand.Rand) error {
		sku := pick(rng)
		start := time.Now()
		unlock := bl.lock(ctx, sku)
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
		bl.tries.Store(0)
		bl.fails.Store(0)
	})
	b.ReportMetric(100*float64(bl.fails.Load())/float64(max(bl.tries.Load(), 1)), "base-fail-%")
}
