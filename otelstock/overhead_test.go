package otelstock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/time/rate"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/lockbench"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/otelstock"
	"github.com/stockkit/inventory/ratelimit"
	"github.com/stockkit/inventory/slogstock"
)

// decorators are the wrappers whose cost is measured, each over the bare
// manager.
func decorators(b *testing.B) []struct {
	name string
	wrap func(inventory.StockManager) (inventory.StockManager, error)
} {
	// The SDK as a service runs it: every span sampled and ended into a
	// batching processor (whose exporter drops them), every metric
	// aggregated by a reader.
	sdkTP := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	sdkMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = sdkTP.Shutdown(context.Background())
		_ = sdkMP.Shutdown(context.Background())
	})
	// INFO: what a service logs; a call that succeeds logs nothing.
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	otelNoop := func(m inventory.StockManager) (inventory.StockManager, error) {
		return otelstock.Wrap(m, otelstock.WithTracerProvider(tracenoop.NewTracerProvider()), otelstock.WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	otelSDK := func(m inventory.StockManager) (inventory.StockManager, error) {
		return otelstock.Wrap(m, otelstock.WithTracerProvider(sdkTP), otelstock.WithMeterProvider(sdkMP))
	}
	// Limits far above what the benchmark asks: the cost of admitting.
	limit := func(m inventory.StockManager) (inventory.StockManager, error) {
		return ratelimit.Wrap(m, ratelimit.WithGlobal(rate.Limit(1e9), 1e9), ratelimit.WithPerSKU(rate.Limit(1e9), 1e9))
	}
	logged := func(m inventory.StockManager) (inventory.StockManager, error) {
		return slogstock.Wrap(m, slogstock.WithLogger(logger))
	}
	return []struct {
		name string
		wrap func(inventory.StockManager) (inventory.StockManager, error)
	}{
		{"otel-noop", otelNoop},
		{"otel-sdk", otelSDK},
		{"ratelimit", limit},
		{"slog", logged},
		{"stack-sdk", func(m inventory.StockManager) (inventory.StockManager, error) {
			m, err := logged(m)
			if err == nil {
				m, err = limit(m)
			}
			if err == nil {
				m, err = otelSDK(m)
			}
			return m, err
		}},
	}
}

// overhead runs b.N Reduce calls of the decorated manager and b.N of the
// bare one, on g goroutines, in alternating rounds of perRound calls (the
// order swapped each round; short rounds, so that both sides of a round
// see the same load of a shared machine), and reports the median ratio of
// decorated to bare time per call, with its spread (the middle half of the
// rounds' ratios, and their extremes), and the time each added per call.
func overhead(b *testing.B, g, perRound int, bare, decorated inventory.StockManager, sku string) {
	ctx := context.Background()
	call := func(m inventory.StockManager) func(*mrand.Rand) error {
		return func(*mrand.Rand) error {
			_, err := m.Reduce(ctx, sku, 1)
			return err
		}
	}
	lockbench.Run(b, g, 4*g, call(bare)) // warm the pool up
	lockbench.Run(b, g, 4*g, call(decorated))
	rounds := max(b.N/perRound, 5)
	n := perRound
	var ratios []float64
	var bareTime, decTime time.Duration
	b.ResetTimer()
	for r := range rounds {
		var tb, td time.Duration
		if r%2 == 0 {
			tb = lockbench.Run(b, g, n, call(bare))
			td = lockbench.Run(b, g, n, call(decorated))
		} else {
			td = lockbench.Run(b, g, n, call(decorated))
			tb = lockbench.Run(b, g, n, call(bare))
		}
		ratios = append(ratios, float64(td)/float64(tb))
		bareTime, decTime = bareTime+tb, decTime+td
	}
	b.StopTimer()
	slices.Sort(ratios)
	calls := float64(rounds * n)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ratios[rounds/2], "ratio-median")
	b.ReportMetric(ratios[rounds/4], "ratio-q1")
	b.ReportMetric(ratios[rounds*3/4], "ratio-q3")
	b.ReportMetric(ratios[0], "ratio-min")
	b.ReportMetric(ratios[rounds-1], "ratio-max")
	b.ReportMetric(float64(rounds), "rounds")
	b.ReportMetric(float64(bareTime.Nanoseconds())/calls, "bare-ns/call")
	b.ReportMetric(float64(decTime.Nanoseconds())/calls, "decorated-ns/call")
	b.ReportMetric(float64((decTime-bareTime).Nanoseconds())/calls, "added-ns/call")
}

// BenchmarkOverhead measures each decorator over luascript on Redis (the
// ratio the targets are set on: OTel with a no-op provider under 2%, with
// the SDK under 10%), and over inventorytest.Memory, where no I/O hides the
// decorator's own CPU time.
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	// One caller (the cost a call's latency sees), and 8 at once (the
	// cost a saturated client's throughput sees).
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("luascript/callers=%d", g), func(b *testing.B) {
			c := testenv.Redis(b)
			bare, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(b, c)))
			if err != nil {
				b.Fatal(err)
			}
			if err := bare.Init(ctx, "bench", inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			for _, d := range decorators(b) {
				b.Run(d.name, func(b *testing.B) {
					m, err := d.wrap(bare)
					if err != nil {
						b.Fatal(err)
					}
					overhead(b, g, 100*g, bare, m, "bench")
				})
			}
		})
	}
	b.Run("memory", func(b *testing.B) {
		bare := inventorytest.NewMemory(0)
		if err := bare.Init(ctx, "bench", inventory.MaxStock); err != nil {
			b.Fatal(err)
		}
		for _, d := range decorators(b) {
			b.Run(d.name, func(b *testing.B) {
				m, err := d.wrap(bare)
				if err != nil {
					b.Fatal(err)
				}
				overhead(b, 1, 5000, bare, m, "bench")
			})
		}
	})
}
