package tiered

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// BenchmarkRedisCost measures what tiered's merged Reduce costs Redis
// itself, against luascript's, on a private redis-server (no persistence)
// that no other client uses: in alternating rounds of a fixed number of
// Reduces of one unit of one hot SKU from g goroutines (64, 256), the
// script time per script call and per Reduce (INFO commandstats, evalsha
// and eval: the script's own run, its commands included) and the Redis CPU
// time per Reduce (INFO cpu: user + system, so time spent waiting for a CPU
// does not count; it includes reading, parsing and replying, and tiered's
// syncer). Unlike throughput, these are barely moved by the load of a
// shared machine. Metrics per side and g: medians over rounds of the script
// µs per script call, the Reduces per script call (the mean batch), the
// script µs and CPU µs per Reduce; and the median, min and max of tiered's
// script µs per Reduce over luascript's in the same round.
func BenchmarkRedisCost(b *testing.B) {
	ctx := context.Background()
	srv := faulttest.StartRedis(b, "--appendonly", "no")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 256, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	db := testenv.MySQL(b)
	tm, err := New(c, db, WithTablePrefix(testenv.Prefix()+"_"), WithChunk(20000), WithLowWater(10000))
	require.NoError(b, err)
	require.NoError(b, tm.CreateTables(ctx))
	b.Cleanup(func() { tm.Close(); _ = tm.dropTables(context.Background()) })
	lm, err := luascript.New(c, luascript.WithPrefix("l"))
	require.NoError(b, err)
	const sku = "hot"
	require.NoError(b, tm.Init(ctx, sku, inventory.MaxStock))
	require.NoError(b, lm.Init(ctx, sku, inventory.MaxStock))
	_, err = tm.Warm(ctx, sku)
	require.NoError(b, err)
	syncCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = tm.Run(syncCtx) }()
	b.Cleanup(func() { stop(); <-done })

	type cost struct{ scripts, scriptUsec, cpuUsec float64 }
	stats := func() cost {
		var r cost
		info, err := c.Info(ctx, "commandstats", "cpu").Result()
		require.NoError(b, err)
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if v, ok := strings.CutPrefix(line, f); ok {
					s, err := strconv.ParseFloat(v, 64)
					require.NoError(b, err)
					r.cpuUsec += s * 1e6
				}
			}
			rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
			if !ok {
				rest, ok = strings.CutPrefix(line, "cmdstat_eval:")
			}
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, err := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					require.NoError(b, err)
					r.scripts += n
				case "usec":
					require.NoError(b, err)
					r.scriptUsec += n
				}
			}
		}
		return r
	}
	const rounds, calls = 7, 30000
	round := func(m inventory.StockManager, g int) cost {
		c0 := stats()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= calls {
					if _, err := m.Reduce(ctx, sku, 1); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		c1 := stats()
		return cost{c1.scripts - c0.scripts - 1, c1.scriptUsec - c0.scriptUsec, c1.cpuUsec - c0.cpuUsec} // less the INFO call
	}
	for _, g := range []int{64, 256} {
		b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
			sides := []struct {
				name string
				m    inventory.StockManager
			}{{"tiered", tm}, {"luascript", lm}}
			got := make([][]cost, len(sides))
			var ratios []float64
			for i := 0; i < b.N; i++ {
				for r := range rounds {
					var perCall [2]float64
					for k := range sides {
						k = (k + r) % len(sides) // who goes first alternates
						cs := round(sides[k].m, g)
						got[k] = append(got[k], cs)
						perCall[k] = cs.scriptUsec / calls
					}
					ratios = append(ratios, perCall[0]/perCall[1])
				}
			}
			for k, s := range sides {
				med := func(f func(cost) float64) float64 {
					v := make([]float64, len(got[k]))
					for i, cs := range got[k] {
						v[i] = f(cs)
					}
					sort.Float64s(v)
					return v[len(v)/2]
				}
				b.ReportMetric(med(func(c cost) float64 { return c.scriptUsec / c.scripts }), s.name+"-µs/script")
				b.ReportMetric(med(func(c cost) float64 { return calls / c.scripts }), s.name+"-calls/script")
				b.ReportMetric(med(func(c cost) float64 { return c.scriptUsec / calls }), s.name+"-script-µs/op")
				b.ReportMetric(med(func(c cost) float64 { return c.cpuUsec / calls }), s.name+"-cpu-µs/op")
			}
			sort.Float64s(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "script-tiered/luascript")
			b.ReportMetric(ratios[0], "min")
			b.ReportMetric(ratios[len(ratios)-1], "max")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkLedger compares a Manager with WithLedger against one without,
// each on its own keys and tables of one private redis-server (no
// persistence) and MariaDB, each with its syncer running (Run): g
// goroutines Reduce one unit of one hot SKU, keyed or not, with a
// reference each (which only the ledger records), in alternating rounds
// of a fixed time, who goes first alternating. Chunks of a million units
// keep the grants (which wait for the SKU's row in SQL, held by the
// syncer's transaction) out of most rounds. Metrics: the median ratio
// of Reduces per second on/off over the rounds, with min and max, and
// each side's median Reduces per second. Run it with -benchtime=1x;
// quote it with the load average (uptime) of the run.
func BenchmarkLedger(b *testing.B) {
	ctx := context.Background()
	srv := faulttest.StartRedis(b, "--appendonly", "no")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 256, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	db := testenv.MySQL(b)
	const sku, g, rounds, roundTime = "hot", 64, 10, 500 * time.Millisecond
	side := func(name string, opts ...Option) *Manager {
		m, err := New(c, db, append([]Option{WithPrefix(name), WithTablePrefix(testenv.Prefix() + "_"),
			WithChunk(1_000_000), WithLowWater(500_000)}, opts...)...)
		require.NoError(b, err)
		require.NoError(b, m.CreateTables(ctx))
		require.NoError(b, m.Init(ctx, sku, inventory.MaxStock))
		syncCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = m.Run(syncCtx) }()
		b.Cleanup(func() { stop(); <-done; m.Close(); _ = m.dropTables(context.Background()) })
		return m
	}
	on, off := side("on", WithLedger()), side("off")
	var seq atomic.Int64
	round := func(m *Manager, keyed bool) float64 {
		// Cancelled, not a deadline: the breaker counts a call cut by its
		// deadline as a failure of Redis, and would open.
		rctx, cancel := context.WithCancel(ctx)
		defer time.AfterFunc(roundTime, cancel).Stop()
		var n atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range g {
			wg.Go(func() {
				for rctx.Err() == nil {
					i := strconv.FormatInt(seq.Add(1), 10)
					opts := []inventory.Option{inventory.WithRef("order " + i)}
					if keyed {
						opts = append(opts, inventory.WithKey("buyer-"+i))
					}
					if _, err := m.Reduce(rctx, sku, 1, opts...); err == nil {
						n.Add(1)
					} else if rctx.Err() == nil && !errors.Is(err, context.Canceled) {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(n.Load()) / time.Since(start).Seconds()
	}
	for _, keyed := range []bool{false, true} {
		b.Run("keyed="+strconv.FormatBool(keyed), func(b *testing.B) {
			var ratios, ons, offs []float64
			for i := 0; i < b.N; i++ {
				for r := range rounds {
					var a, z float64
					if r%2 == 0 {
						a, z = round(on, keyed), round(off, keyed)
					} else {
						z, a = round(off, keyed), round(on, keyed)
					}
					ratios, ons, offs = append(ratios, a/z), append(ons, a), append(offs, z)
					b.Logf("round %d: on %.0f/s, off %.0f/s; stalls so far: on %d, off %d", r, a, z, on.Stalls(), off.Stalls())
				}
			}
			med := func(v []float64) float64 { sort.Float64s(v); return v[len(v)/2] }
			b.ReportMetric(med(ratios), "on/off")
			b.ReportMetric(ratios[0], "min")
			b.ReportMetric(ratios[len(ratios)-1], "max")
			b.ReportMetric(med(ons), "on-ops/s")
			b.ReportMetric(med(offs), "off-ops/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
