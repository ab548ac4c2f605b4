package luascript

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// holdsHook is what orders.go put in move.lua in place of noHook.
const (
	holdsHook = `local both = redis.call('MGET', KEYS[1], KEYS[#KEYS])
local raw = both[1]
if both[2] then -- orders_holds.lua: expired holds go back first
  local h = holds()
  if h.release_due(h.sku_key(KEYS[#KEYS], 'e'), both[2]) > 0 then
    raw = redis.call('GET', KEYS[1])
  end
end
`
	noHook = "local raw = redis.call('GET', KEYS[1])\n"
)

// BenchmarkHoldsHook measures what the lazy release of holds adds to a
// Reduce on a SKU that has no holds: move.lua as it runs now (after
// orders_holds.lua, with the holds set as its last key) beside move.lua
// without the hook (no holds code, no extra key), both by EVALSHA with the
// same arguments, unkeyed, in alternating rounds, on a private Redis (no
// other client, no persistence). Metrics: the median ratio of their
// throughputs (with hook / without) with its min and max, and the median
// ratio of the Redis time per script (INFO commandstats), its min and max,
// and the median microseconds the hook adds per call on the server.
func BenchmarkHoldsHook(b *testing.B) {
	if !strings.Contains(moveLua, holdsHook) {
		b.Fatal("move.lua has no holds hook")
	}
	bare := redis.NewScript(strings.Replace(moveLua, holdsHook, noHook, 1))
	ctx := context.Background()
	srv := faulttest.StartRedis(b)
	shared := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	b.Cleanup(func() { shared.Close() })
	if err := shared.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		b.Fatal(err)
	}
	const prefix = "bench"
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			sku := fmt.Sprint("hook-", g)
			stock := rediskeys.Stock(prefix, sku)
			holds := rediskeys.HoldMarker(prefix, sku)
			if err := shared.Set(ctx, stock, inventory.MaxStock, 0).Err(); err != nil {
				b.Fatal(err)
			}
			args := []any{"reduce", 1, inventory.MaxStock, 1000, "none", "", rediskeys.WindowSize, 1000}
			with := func() error {
				return moveScript.Run(ctx, shared, []string{stock, holds}, args...).Err()
			}
			without := func() error {
				return bare.Run(ctx, shared, []string{stock}, args...).Err()
			}
			const rounds = 11
			var ratios, cpu, added []float64
			for range rounds {
				u0 := evalUsec(b, shared)
				w0 := hookRun(b, g, b.N, without)
				u1 := evalUsec(b, shared)
				w1 := hookRun(b, g, b.N, with)
				u2 := evalUsec(b, shared)
				ratios = append(ratios, w1/w0)
				cpu = append(cpu, (u2-u1)/(u1-u0))
				added = append(added, ((u2-u1)-(u1-u0))/float64(b.N))
			}
			slices.Sort(ratios)
			slices.Sort(cpu)
			slices.Sort(added)
			b.ReportMetric(ratios[rounds/2], "x-nohook-median")
			b.ReportMetric(ratios[0], "x-nohook-min")
			b.ReportMetric(ratios[rounds-1], "x-nohook-max")
			b.ReportMetric(cpu[rounds/2], "redis-µs-x-nohook-median")
			b.ReportMetric(cpu[0], "redis-µs-x-nohook-min")
			b.ReportMetric(cpu[rounds-1], "redis-µs-x-nohook-max")
			b.ReportMetric(added[rounds/2], "redis-µs-added-median")
		})
	}
}

// hookRun makes n calls of op from g goroutines and returns calls/s.
func hookRun(b *testing.B, g, n int, op func() error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(t0).Seconds()
}

// evalUsec returns the microseconds Redis has spent in EVAL and EVALSHA.
func evalUsec(b *testing.B, c *redis.Client) float64 {
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
				var u float64
				fmt.Sscan(v, &u)
				total += u
			}
		}
	}
	return total
}
