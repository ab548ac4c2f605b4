package tiered

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// BenchmarkHotSKU times Reduce of one unit of one hot SKU from 64
// goroutines: tiered (MariaDB behind, a syncer running) against luascript
// on the same Redis, in alternating rounds of fixed length; it reports the
// median ratio of tiered's throughput to luascript's and its spread.
func BenchmarkHotSKU(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Get(testenv.EnvRedis, testenv.DefaultRedis), PoolSize: 64, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Missing(b, "Redis", err)
	}
	prefix := testenv.RedisPrefix(b, c)
	db := testenv.MySQL(b)
	tables := testenv.Prefix() + "_"
	tm, err := New(c, db, WithPrefix(prefix), WithTablePrefix(tables), WithChunk(20000), WithLowWater(10000))
	require.NoError(b, err)
	require.NoError(b, tm.CreateTables(ctx))
	b.Cleanup(func() { tm.Close(); _ = tm.dropTables(context.Background()) })
	lm, err := luascript.New(c, luascript.WithPrefix(prefix+"l"))
	require.NoError(b, err)
	const sku = "hot"
	stock := inventory.MaxStock / 4
	require.NoError(b, tm.Init(ctx, sku, stock))
	require.NoError(b, lm.Init(ctx, sku, stock))
	_, err = tm.Warm(ctx, sku)
	require.NoError(b, err)
	syncCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = tm.Run(syncCtx) }()
	b.Cleanup(func() { stop(); <-done })

	round := func(m inventory.StockManager, d time.Duration) float64 {
		const g = 64
		counts := make(chan int, g)
		deadline := time.Now().Add(d)
		for range g {
			go func() {
				n := 0
				for time.Now().Before(deadline) {
					if _, err := m.Reduce(ctx, sku, 1); err != nil {
						b.Error(err)
						break
					}
					n++
				}
				counts <- n
			}()
		}
		total := 0
		for range g {
			total += <-counts
		}
		return float64(total) / d.Seconds()
	}
	const rounds = 7
	var ratios []float64
	var lastT, lastL float64
	for i := 0; i < b.N; i++ {
		ratios = ratios[:0]
		for range rounds {
			l := round(lm, 300*time.Millisecond)
			t := round(tm, 300*time.Millisecond)
			ratios = append(ratios, t/l)
			lastT, lastL = t, l
		}
	}
	sort.Float64s(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "tiered/luascript")
	b.ReportMetric(ratios[0], "min")
	b.ReportMetric(ratios[len(ratios)-1], "max")
	b.ReportMetric(lastT, "tiered-calls/s")
	b.ReportMetric(lastL, "luascript-calls/s")
	b.Logf("stalls %d, refill failures %d", tm.Stalls(), tm.RefillFailures())
}
