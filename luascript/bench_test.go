package luascript_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// BenchmarkResendWindow measures what protecting calls against go-redis's
// resends costs: a Manager over a client that may resend (MaxRetries 3,
// the default: unkeyed calls use the resend window, keyed calls a token in
// their key record) beside the same Manager over a client that never
// resends (MaxRetries -1: the protection-free path). Both run in
// alternating rounds at 64 goroutines; the metrics are the median ratio of
// their throughputs (protected / free) and its min and max over the rounds.
func BenchmarkResendWindow(b *testing.B) {
	ctx := context.Background()
	shared := testenv.Redis(b) // checks the server and cleans up
	prefix := testenv.RedisPrefix(b, shared)
	newClient := func(retries int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: shared.Options().Addr, PoolSize: 64, MaxRetries: retries,
			ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		return c
	}
	protected, err := luascript.New(newClient(3), luascript.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	free, err := luascript.New(newClient(-1), luascript.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	const g, rounds = 64, 7
	var keyed atomic.Int64
	for _, layout := range []struct {
		name string
		skus int
	}{{"hot", 1}, {"spread", 64}} {
		for _, withKey := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/keyed=%v", layout.name, withKey), func(b *testing.B) {
				skus := make([]string, layout.skus)
				for i := range skus {
					skus[i] = fmt.Sprintf("window-%s-%v-%d", layout.name, withKey, i)
					if err := protected.Init(ctx, skus[i], inventory.MaxStock); err != nil {
						b.Fatal(err)
					}
				}
				op := func(m *luascript.Manager) func(i int) error {
					return func(i int) error {
						var opts []inventory.Option
						if withKey {
							opts = append(opts, inventory.WithKey(fmt.Sprint("w", keyed.Add(1))))
						}
						_, err := m.Reduce(ctx, skus[i%len(skus)], 1, opts...)
						return err
					}
				}
				// Throughput, and the Redis time per script (INFO
				// commandstats: other clients of the server add noise).
				var ratios, cpuRatios []float64
				for range rounds {
					u0 := scriptUsec(b, shared)
					f, _ := run(b, g, b.N, op(free))
					u1 := scriptUsec(b, shared)
					p, _ := run(b, g, b.N, op(protected))
					u2 := scriptUsec(b, shared)
					ratios = append(ratios, p/f)
					cpuRatios = append(cpuRatios, (u2-u1)/(u1-u0))
				}
				slices.Sort(ratios)
				slices.Sort(cpuRatios)
				b.ReportMetric(ratios[rounds/2], "x-free-median")
				b.ReportMetric(ratios[0], "x-free-min")
				b.ReportMetric(ratios[rounds-1], "x-free-max")
				b.ReportMetric(cpuRatios[rounds/2], "redis-µs-x-free-median")
			})
		}
	}
}

// scriptUsec returns the microseconds Redis has spent running scripts.
func scriptUsec(b *testing.B, c *redis.Client) float64 {
	stats, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(stats, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.Index(line, ":")+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				total += u
			}
		}
	}
	return total
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
