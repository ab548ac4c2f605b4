// Package lockbench holds what the lock strategies' benchmarks share: the
// stores under test with the bare read and write their baselines do on the
// same data, and lock-wait recording.
package lockbench

import (
	"context"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// Backend is a store under benchmark, with the bare read and write a
// baseline does on the same data.
type Backend struct {
	Store lockmgr.Store
	Read  func(ctx context.Context, sku string) (int64, error)
	Write func(ctx context.Context, sku string, n int64) error
}

// Redis is a redisstore on c under a fresh prefix, whose keys are deleted
// when b ends.
func Redis(b *testing.B, c redis.UniversalClient) Backend {
	prefix := testenv.RedisPrefix(b, c)
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	return Backend{
		Store: s,
		Read: func(ctx context.Context, sku string) (int64, error) {
			return c.Get(ctx, rediskeys.Stock(prefix, sku)).Int64()
		},
		Write: func(ctx context.Context, sku string, n int64) error {
			return c.Set(ctx, rediskeys.Stock(prefix, sku), n, 0).Err()
		},
	}
}

// SQL is a sqlstore on fresh tables in db.
func SQL(b *testing.B, db *sqlx.DB) Backend {
	schema := sqltest.Schema(b, db)
	s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	sel := db.Rebind("SELECT stock FROM " + schema.Table + " WHERE sku = ?")
	upd := db.Rebind("UPDATE " + schema.Table + " SET stock = ? WHERE sku = ?")
	return Backend{
		Store: s,
		Read: func(ctx context.Context, sku string) (n int64, err error) {
			return n, db.GetContext(ctx, &n, sel, sku)
		},
		Write: func(ctx context.Context, sku string, n int64) error {
			_, err := db.ExecContext(ctx, upd, n, sku)
			return err
		},
	}
}

// Waits records lock waits.
type Waits struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one wait.
func (w *Waits) Add(d time.Duration) {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
}

// Reset forgets every wait recorded so far.
func (w *Waits) Reset() {
	w.mu.Lock()
	w.d = nil
	w.mu.Unlock()
}

// Pct returns the p-th percentile of the waits, in microseconds.
func (w *Waits) Pct(p float64) float64 {
	if len(w.d) == 0 {
		return 0
	}
	slices.Sort(w.d)
	return float64(w.d[int(float64(len(w.d)-1)*p)].Microseconds())
}

// TimedLocker records in W how long each Acquire waits.
type TimedLocker struct {
	lockmgr.Locker
	W *Waits
}

// Acquire implements lockmgr.Locker.
func (t TimedLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	start := time.Now()
	le, err := t.Locker.Acquire(ctx, name)
	t.W.Add(time.Since(start))
	return le, err
}

// Run makes n calls of op from g goroutines, each with its own random
// source, and returns the wall time they took.
func Run(b *testing.B, g, n int, op func(rng *mrand.Rand) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range g {
		rng := mrand.New(mrand.NewPCG(uint64(w), 1))
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(rng); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// Compare measures lib beside base on g goroutines: it warms the connection
// pools up with both, calls reset and clears lw and bw (the lock waits of
// lib and base), then runs b.N calls of each in four alternating turns, so
// that both see the same machine. Only lib's turns are timed as the
// benchmark. It reports ops/s, base-ops/s, their ratio and the p50 and p99
// lock waits of both.
func Compare(b *testing.B, g int, lib, base func(rng *mrand.Rand) error, lw, bw *Waits, reset func()) {
	Run(b, g, 2*g, lib)
	Run(b, g, 2*g, base)
	lw.Reset()
	bw.Reset()
	reset()
	b.ResetTimer()
	var libTime, baseTime time.Duration
	const turns = 4
	for i := range turns {
		n := b.N / turns
		if i < b.N%turns {
			n++
		}
		b.StartTimer()
		libTime += Run(b, g, n, lib)
		b.StopTimer()
		baseTime += Run(b, g, n, base)
	}
	libOps, baseOps := float64(b.N)/libTime.Seconds(), float64(b.N)/baseTime.Seconds()
	b.ReportMetric(libOps, "ops/s")
	b.ReportMetric(baseOps, "base-ops/s")
	b.ReportMetric(libOps/baseOps, "ratio")
	b.ReportMetric(lw.Pct(0.5), "wait-p50-µs")
	b.ReportMetric(lw.Pct(0.99), "wait-p99-µs")
	b.ReportMetric(bw.Pct(0.5), "base-wait-p50-µs")
	b.ReportMetric(bw.Pct(0.99), "base-wait-p99-µs")
}
