package luascript_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/baseline"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/luascript"
)

// bareScript is the baseline of every luascript benchmark.
var bareScript = baseline.RedisScript

// contender is one way of calling: op makes call i (from many goroutines).
type contender struct {
	name string
	op   func(i int) error
}

// BenchmarkRedisCost measures what each way of calling costs Redis itself:
// the CPU time (user + system, INFO cpu: getrusage, so time spent waiting
// for a CPU does not count) of a private redis-server (no persistence) that
// no other client uses, per call, at 64 goroutines on one hot SKU. Unlike
// throughput, it is barely moved by the load of a shared machine; it counts
// everything Redis does for a call (reading, parsing, the script, the
// reply, the syscalls). Metrics: per contender the median over rounds of
// Redis CPU µs per call, and the median, min and max of its ratio to the
// bare loop's in the same round.
func BenchmarkRedisCost(b *testing.B) {
	ctx := context.Background()
	addr := faulttest.StartRedis(b, "--appendonly", "no").Addr()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	free := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, MaxRetries: -1, ContextTimeoutEnabled: true})
	b.Cleanup(func() { free.Close() })
	newManager := func(c *redis.Client, opts ...luascript.Option) *luascript.Manager {
		m, err := luascript.New(c, append([]luascript.Option{luascript.WithKeyTTL(time.Minute)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	perCall, perCallFree, merged := newManager(c, luascript.WithMaxBatch(1)), newManager(free, luascript.WithMaxBatch(1)), newManager(c)
	ledgered := newManager(c, luascript.WithLedger(0))
	if err := perCall.Init(ctx, "hot", inventory.MaxStock); err != nil {
		b.Fatal(err)
	}
	if err := bareScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	key := []string{rediskeys.Stock(rediskeys.DefaultPrefix, "hot")}
	var keys atomic.Int64
	reduce := func(m *luascript.Manager, keyed bool) func(int) error {
		return func(int) error {
			var opts []inventory.Option
			if keyed {
				opts = append(opts, inventory.WithKey("k"+strconv.FormatInt(keys.Add(1), 10)))
			}
			_, err := m.Reduce(ctx, "hot", 1, opts...)
			return err
		}
	}
	cs := []contender{
		{name: "bare", op: func(int) error { return bareScript.EvalSha(ctx, c, key, 1).Err() }},
		{name: "unkeyed", op: reduce(perCall, false)},
		{name: "keyed", op: reduce(perCall, true)},
		{name: "unkeyed-free", op: reduce(perCallFree, false)},
		{name: "merged", op: reduce(merged, false)},
		{name: "merged-keyed", op: reduce(merged, true)},
		{name: "merged-ledger", op: reduce(ledgered, false)},
		{name: "merged-keyed-ledger", op: reduce(ledgered, true)},
	}
	const rounds, calls, g = 5, 20000, 64
	usec := make([][]float64, len(cs))
	for range rounds {
		for k, ct := range cs {
			u0 := redisCPU(b, c)
			var next atomic.Int64
			var wg sync.WaitGroup
			for range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= calls; i = next.Add(1) {
						if err := ct.op(int(i)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			usec[k] = append(usec[k], (redisCPU(b, c)-u0)/calls)
		}
	}
	for k, ct := range cs {
		b.ReportMetric(median(usec[k]), ct.name+"-redis-cpu-µs/op")
		if k > 0 {
			r := make([]float64, rounds)
			for i := range r {
				r[i] = usec[k][i] / usec[0][i]
			}
			b.ReportMetric(median(r), ct.name+"-x-bare-median")
			b.ReportMetric(slices.Min(r), ct.name+"-x-bare-min")
			b.ReportMetric(slices.Max(r), ct.name+"-x-bare-max")
		}
	}
}

// redisCPU returns the CPU time Redis has used, in microseconds.
func redisCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				s, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += s * 1e6
			}
		}
	}
	return total
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
