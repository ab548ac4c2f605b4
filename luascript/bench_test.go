package luascript_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"os/exec"
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

// bareLua is the baseline of every luascript benchmark: a bare
// check-and-DECRBY script, safe (it never oversells) but with no keys, no
// errors told apart and no protection against resends.
const bareLua = `local v = tonumber(redis.call('GET', KEYS[1]))
if v and v >= tonumber(ARGV[1]) then return redis.call('DECRBY', KEYS[1], ARGV[1]) end
return -1`

var bareScript = redis.NewScript(bareLua)

// contender is one side of a comparison: op makes call i (from many
// goroutines), or run runs for a while and returns calls per second.
type contender struct {
	name string
	op   func(i int) error
	run  func(d time.Duration) float64
}

// BenchmarkReduce compares luascript's Reduce with the bare
// check-and-DECRBY EVALSHA loop (bareLua, precomputed keys), on one hot SKU
// and on 64 spread SKUs, at 16, 64 and 256 goroutines, in alternating
// rounds: each round runs every contender for the same time, one after
// another, in a rotated order; the metrics are, per contender, the median
// over the rounds of its throughput divided by the bare loop's in the same
// round, with the min and max (x-bare-median, -min, -max).
//
// Contenders:
//   - unkeyed, keyed: calls one at a time (WithMaxBatch(1)), on a client
//     that resends (MaxRetries 3, the default): issue 13.1's per-call path;
//   - unkeyed-free, keyed-free: the same on a client that never resends
//     (MaxRetries -1): the protection-free path of issue 9.3;
//   - merged, merged-keyed: the default Manager, which merges concurrent
//     calls of one slot (issue 13.2).
//
// Every call has a fresh key where keyed. The stock never runs out.
// Run it alone, with -benchtime 1x: each sub-benchmark takes
// rounds x contenders x roundTime.
func BenchmarkReduce(b *testing.B) {
	ctx := context.Background()
	shared := testenv.Redis(b)
	prefix := testenv.RedisPrefix(b, shared)
	client := func(retries, pool int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: shared.Options().Addr, PoolSize: pool, MaxRetries: retries, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		return c
	}
	const rounds, roundTime = 7, 150 * time.Millisecond
	var keys atomic.Int64
	for _, layout := range []struct {
		name string
		skus int
	}{{"hot", 1}, {"spread", 64}} {
		for _, g := range []int{16, 64, 256} {
			b.Run(fmt.Sprintf("%s/g=%d", layout.name, g), func(b *testing.B) {
				resends, free := client(3, g), client(-1, g)
				newManager := func(c *redis.Client, opts ...luascript.Option) *luascript.Manager {
					m, err := luascript.New(c, append([]luascript.Option{luascript.WithPrefix(prefix), luascript.WithKeyTTL(time.Minute)}, opts...)...)
					if err != nil {
						b.Fatal(err)
					}
					return m
				}
				perCall, perCallFree := newManager(resends, luascript.WithMaxBatch(1)), newManager(free, luascript.WithMaxBatch(1))
				merged := newManager(resends)
				skus := make([]string, layout.skus)
				stockKeys := make([]string, layout.skus)
				for i := range skus {
					skus[i] = fmt.Sprintf("bench-%s-%d-%d", layout.name, g, i)
					stockKeys[i] = rediskeys.Stock(prefix, skus[i])
					if err := perCall.Init(ctx, skus[i], inventory.MaxStock); err != nil {
						b.Fatal(err)
					}
				}
				if err := bareScript.Load(ctx, resends).Err(); err != nil {
					b.Fatal(err)
				}
				reduce := func(m *luascript.Manager, keyed bool) func(i int) error {
					return func(i int) error {
						var err error
						if keyed {
							_, err = m.Reduce(ctx, skus[i%len(skus)], 1, inventory.WithKey("k"+strconv.FormatInt(keys.Add(1), 10)))
						} else {
							_, err = m.Reduce(ctx, skus[i%len(skus)], 1)
						}
						return err
					}
				}
				cs := []contender{
					{name: "bare", op: func(i int) error {
						return bareScript.EvalSha(ctx, resends, stockKeys[i%len(stockKeys):][:1], 1).Err()
					}},
					{name: "unkeyed", op: reduce(perCall, false)},
					{name: "keyed", op: reduce(perCall, true)},
					{name: "unkeyed-free", op: reduce(perCallFree, false)},
					{name: "keyed-free", op: reduce(perCallFree, true)},
					{name: "merged", op: reduce(merged, false)},
					{name: "merged-keyed", op: reduce(merged, true)},
				}
				report(b, cs)(alternate(b, cs, rounds, g, roundTime))
			})
		}
	}
}

// BenchmarkMergedCeiling compares merged calls on one hot SKU with
// redis-benchmark's unpipelined EVALSHA of bareLua at the same number of
// connections (-c g), in alternating rounds as BenchmarkReduce (issue 13.2:
// merged unkeyed at least 2x that ceiling, keyed at least 1x). The metrics
// are per contender the median, min and max over the rounds of its
// throughput divided by redis-benchmark's around it.
func BenchmarkMergedCeiling(b *testing.B) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		testenv.Missing(b, "redis-benchmark (apt-get install redis-tools)", err)
	}
	ctx := context.Background()
	shared := testenv.Redis(b)
	prefix := testenv.RedisPrefix(b, shared)
	const rounds, roundTime = 7, 500 * time.Millisecond
	var keys atomic.Int64
	for _, g := range []int{64, 256} {
		b.Run(fmt.Sprintf("hot/g=%d", g), func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: shared.Options().Addr, PoolSize: g, ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithKeyTTL(time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			sku := fmt.Sprint("ceiling-", g)
			if err := m.Init(ctx, sku, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			sha, err := bareScript.Load(ctx, c).Result()
			if err != nil {
				b.Fatal(err)
			}
			key := rediskeys.Stock(prefix, sku)
			var last float64 // redis-benchmark's rate, for its request count
			ceiling := func(roundTime time.Duration) float64 {
				n := max(int(last*roundTime.Seconds()), 20*g)
				out, err := exec.Command(bin, "-h", shared.Options().Addr[:len(shared.Options().Addr)-len(":6379")],
					"-p", "6379", "-c", strconv.Itoa(g), "-n", strconv.Itoa(n), "--csv",
					"evalsha", sha, "1", key, "1").Output()
				if err != nil {
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						err = fmt.Errorf("%w: %s", err, ee.Stderr)
					}
					b.Fatalf("redis-benchmark: %v (output %q)", err, out)
				}
				rows, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
				if err != nil || len(rows) < 2 {
					b.Fatalf("redis-benchmark output %q: %v", out, err)
				}
				last, err = strconv.ParseFloat(rows[1][1], 64)
				if err != nil {
					b.Fatal(err)
				}
				return last
			}
			ceiling(roundTime) // warm up, and learn the rate
			reduce := func(keyed bool) func(i int) error {
				return func(int) error {
					var opts []inventory.Option
					if keyed {
						opts = append(opts, inventory.WithKey("c"+strconv.FormatInt(keys.Add(1), 10)))
					}
					_, err := m.Reduce(ctx, sku, 1, opts...)
					return err
				}
			}
			cs := []contender{{name: "redis-benchmark", run: ceiling}, {name: "merged", op: reduce(false)}, {name: "merged-keyed", op: reduce(true)}}
			report(b, cs)(alternate(b, cs, rounds, g, roundTime))
		})
	}
}

// alternate runs the contenders cs from g goroutines for roundTime each,
// rounds times, each run of a contender between two runs of the baseline
// cs[0] (B c1 B c2 ... B cn B, the contenders' order rotated every round);
// it returns per round each contender's calls per second divided by the
// mean of the two baseline runs around it, and the baseline's calls per
// second. The bracketing cancels the drift of a machine whose load moves.
func alternate(b *testing.B, cs []contender, rounds, g int, roundTime time.Duration) (ratios, ops [][]float64) {
	ratios, ops = make([][]float64, len(cs)), make([][]float64, len(cs))
	run := func(c contender) float64 {
		if c.run != nil {
			return c.run(roundTime)
		}
		return timed(b, g, roundTime, c.op)
	}
	for r := range rounds {
		before := run(cs[0])
		ops[0] = append(ops[0], before)
		for j := range len(cs) - 1 {
			k := 1 + (j+r)%(len(cs)-1)
			n := run(cs[k])
			after := run(cs[0])
			ops[0] = append(ops[0], after)
			ops[k] = append(ops[k], n)
			ratios[k] = append(ratios[k], n/((before+after)/2))
			before = after
		}
	}
	return ratios, ops
}

// report reports each contender's median calls per second and, but for
// the baseline cs[0], the median, min and max of its ratios to it.
func report(b *testing.B, cs []contender) func(ratios, ops [][]float64) {
	return func(ratios, ops [][]float64) { reportRatios(b, cs, ratios, ops) }
}

func reportRatios(b *testing.B, cs []contender, ratios, ops [][]float64) {
	for k, c := range cs {
		b.ReportMetric(median(ops[k]), c.name+"-ops/s")
	}
	for k, c := range cs[1:] {
		r := slices.Clone(ratios[k+1])
		slices.Sort(r)
		b.ReportMetric(median(r), c.name+"-x-"+cs[0].name+"-median")
		b.ReportMetric(r[0], c.name+"-x-"+cs[0].name+"-min")
		b.ReportMetric(r[len(r)-1], c.name+"-x-"+cs[0].name+"-max")
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// timed makes calls of op from g goroutines for d and returns calls per
// second.
func timed(b *testing.B, g int, d time.Duration, op func(i int) error) float64 {
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	t0 := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := op(int(next.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return float64(next.Load()) / time.Since(t0).Seconds()
}

// BenchmarkSoldOut compares refusals on a sold-out SKU (issue 13.3): the
// bare loop (one EVALSHA per refusal), the default Manager (one script call
// per refusal, merged) and WithRefusals(50ms) (refused in the process),
// in alternating rounds as BenchmarkReduce, at 64 goroutines.
func BenchmarkSoldOut(b *testing.B) {
	ctx := context.Background()
	c := testenv.Redis(b)
	prefix := testenv.RedisPrefix(b, c)
	const rounds, roundTime, g = 7, 150 * time.Millisecond, 64
	plain, err := luascript.New(c, luascript.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	local, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithRefusals(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	if err := plain.Init(ctx, "gone", 0); err != nil {
		b.Fatal(err)
	}
	if err := bareScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	key := []string{rediskeys.Stock(prefix, "gone")}
	refuse := func(m *luascript.Manager) func(int) error {
		return func(int) error {
			if _, err := m.Reduce(ctx, "gone", 1); !errors.Is(err, inventory.ErrInsufficientStock) {
				return fmt.Errorf("want a refusal, got %v", err)
			}
			return nil
		}
	}
	cs := []contender{
		{name: "bare", op: func(int) error { return bareScript.EvalSha(ctx, c, key, 1).Err() }},
		{name: "luascript", op: refuse(plain)},
		{name: "refusals", op: refuse(local)},
	}
	report(b, cs)(alternate(b, cs, rounds, g, roundTime))
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
	addr := privateRedis(b)
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

// privateRedis starts a redis-server without persistence on a free port,
// killed when b ends, and returns its address.
func privateRedis(b *testing.B) string {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(b, "redis-server", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	port := addr[strings.LastIndex(addr, ":")+1:]
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", b.TempDir())
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for i := 0; c.Ping(context.Background()).Err() != nil; i++ {
		if i == 100 {
			b.Fatal("private redis-server does not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr
}
