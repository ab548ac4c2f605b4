package tiered

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

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
