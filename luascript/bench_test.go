package luascript_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// BenchmarkReduce measures luascript taking one unit at a time, on one hot SKU
// and on 64 spread SKUs, at 1, 16 and 64 goroutines, beside a baseline
// measured in the same run: a bare DECRBY on the same key, one round trip with
// no check at all (it would oversell). The ratio "x-baseline" is the price of
// the check, the key and the script.
func BenchmarkReduce(b *testing.B) {
	c := testenv.Redis(b)
	prefix := testenv.RedisPrefix(b, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var keyed atomic.Int64 // every call has a fresh key
	for _, layout := range []struct {
		name string
		skus int
	}{{"hot", 1}, {"spread", 64}} {
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/g=%d", layout.name, g), func(b *testing.B) {
				skus := make([]string, layout.skus)
				for i := range skus {
					skus[i] = fmt.Sprintf("bench-%s-%d-%d", layout.name, g, i)
				}
				lib := func(i int) error {
					_, err := m.Reduce(ctx, skus[i%len(skus)], 1, inventory.WithKey(fmt.Sprint("b", keyed.Add(1))))
					return err
				}
				bare := func(i int) error {
					return c.DecrBy(ctx, rediskeys.Stock(prefix, skus[i%len(skus)]), 1).Err()
				}
				reset := func() {
					for _, s := range skus {
						if err := m.Init(ctx, s, inventory.MaxStock); err != nil {
							b.Fatal(err)
						}
					}
				}
				// Alternate turns so both see the same machine load.
				var libOps, bareOps float64
				var lat []time.Duration
				for range 2 {
					reset()
					base, _ := run(b, g, b.N, bare)
					reset()
					ops, l := run(b, g, b.N, lib)
					bareOps += base
					libOps += ops
					lat = append(lat, l...)
				}
				slices.Sort(lat)
				b.ReportMetric(libOps/2, "ops/s")
				b.ReportMetric(bareOps/2, "baseline-ops/s")
				b.ReportMetric(libOps/bareOps, "x-baseline")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

// run makes n calls of op from g goroutines; it returns calls per second
// and each call's latency.
func run(b *testing.B, g, n int, op func(i int) error) (float64, []time.Duration) {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				s := time.Now()
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(s)
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(t0).Seconds(), lat
}
