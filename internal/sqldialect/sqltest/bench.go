package sqltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/sqlstore"
)

// Taker takes one unit of a SKU.
type Taker interface {
	Take(ctx context.Context, sku string) error
}

// Counter is a Taker that counts its compare-and-set attempts and the ones
// that lost to another writer.
type Counter interface {
	Counts() (attempts, conflicts int64)
}

// TakerFunc adapts a function to Taker.
type TakerFunc func(ctx context.Context, sku string) error

// Take calls f.
func (f TakerFunc) Take(ctx context.Context, sku string) error { return f(ctx, sku) }

// Variant is one way of taking stock that a benchmark measures.
type Variant struct {
	Name string
	New  func(tb testing.TB, db *sqlx.DB, schema sqlstore.Schema) Taker
}

// SKUs is the number of SKUs of the spread layout.
const SKUs = 64

// Goroutines are the concurrency levels every benchmark runs at.
var Goroutines = []int{1, 16, 64}

// Bench measures each variant taking one unit at a time, per engine, on one
// hot SKU and on 64 spread SKUs, at 1, 16 and 64 goroutines, beside the
// baseline measured in the same run: the bare conditional UPDATE
//
//	UPDATE stock SET stock = stock - 1 WHERE sku = ? AND stock >= 1
//
// issued through the driver. It reports ops/s, the ratio to the baseline
// ("x-baseline"), the p50 and p99 latency and, for a Counter, the share of
// compare-and-set attempts that lost ("conflict-%") and the calls per
// compare-and-set
// ("calls/cas"). A call that gives up with ErrContention is retried, as a
// caller would, and counted ("gaveup-%" of calls).
func Bench(b *testing.B, variants ...Variant) {
	for _, e := range Engines {
		b.Run(e.Name, func(b *testing.B) {
			db := e.Open(b)
			if db.DriverName() != "sqlite" {
				db.SetMaxOpenConns(64)
				db.SetMaxIdleConns(64)
			}
			schema := Schema(b, db)
			store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
			require.NoError(b, err)
			skus := make([]string, SKUs)
			for i := range skus {
				skus[i] = fmt.Sprintf("bench-%d", i)
				require.NoError(b, store.Init(context.Background(), skus[i], inventory.MaxStock))
			}
			q := `"`
			if db.DriverName() == "mysql" {
				q = "`"
			}
			update := db.Rebind("UPDATE " + q + schema.Table + q + " SET stock = stock - 1 WHERE sku = ? AND stock >= 1")
			baseline := Variant{Name: "baseline", New: func(testing.TB, *sqlx.DB, sqlstore.Schema) Taker {
				return TakerFunc(func(ctx context.Context, sku string) error {
					_, err := db.ExecContext(ctx, update, sku)
					return err
				})
			}}
			takers := make([]Taker, len(variants))
			for i, v := range variants {
				takers[i] = v.New(b, db, schema)
			}
			for _, layout := range []struct {
				name string
				n    int
			}{{"hot", 1}, {"spread", SKUs}} {
				for _, g := range Goroutines {
					b.Run(fmt.Sprintf("%s/g=%d", layout.name, g), func(b *testing.B) {
						var base float64
						b.Run(baseline.Name, func(b *testing.B) {
							base = run(b, baseline.New(b, db, schema), skus[:layout.n], g)
						})
						for i, v := range variants {
							b.Run(v.Name, func(b *testing.B) {
								if ops := run(b, takers[i], skus[:layout.n], g); base > 0 {
									b.ReportMetric(ops/base, "x-baseline")
								}
							})
						}
					})
				}
			}
		})
	}
}

// run takes b.N units with g goroutines and returns the ops/s.
func run(b *testing.B, t Taker, skus []string, g int) float64 {
	ctx := context.Background()
	var a0, c0 int64
	counter, counts := t.(Counter)
	if counts {
		a0, c0 = counter.Counts()
	}
	lat := make([]time.Duration, b.N)
	var next, gaveUp atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range g {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				sku := skus[rand.IntN(len(skus))]
				err := t.Take(ctx, sku)
				for errors.Is(err, inventory.ErrContention) { // gave up: the caller retries
					gaveUp.Add(1)
					err = t.Take(ctx, sku)
				}
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	ops := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(ops, "ops/s")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	if n := gaveUp.Load(); n > 0 {
		b.ReportMetric(100*float64(n)/float64(b.N), "gaveup-%")
	}
	if counts {
		a, c := counter.Counts()
		if a > a0 {
			b.ReportMetric(100*float64(c-c0)/float64(a-a0), "conflict-%")
			b.ReportMetric(float64(b.N)/float64(a-a0), "calls/cas")
		}
	}
	return ops
}
