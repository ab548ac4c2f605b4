package otelstock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/time/rate"

	"github.com/stockkit/inventory"
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
	// A tenth of the traces sampled, as services commonly run.
	sampledTP := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))))
	// Where the span's cost goes: the same span ended into a processor
	// that exports it at once in the caller's goroutine (no hand-over to
	// the batching goroutine), and into none at all (the span made,
	// attributed and ended: the floor of any wrapper that makes one).
	syncTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	bareTP := sdktrace.NewTracerProvider()
	b.Cleanup(func() {
		_ = syncTP.Shutdown(context.Background())
		_ = bareTP.Shutdown(context.Background())
		_ = sampledTP.Shutdown(context.Background())
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
		{"otel-sdk-sampled10", func(m inventory.StockManager) (inventory.StockManager, error) {
			return otelstock.Wrap(m, otelstock.WithTracerProvider(sampledTP), otelstock.WithMeterProvider(sdkMP))
		}},
		{"otel-sdk-metrics", func(m inventory.StockManager) (inventory.StockManager, error) { // SDK meter, no spans
			return otelstock.Wrap(m, otelstock.WithTracerProvider(tracenoop.NewTracerProvider()), otelstock.WithMeterProvider(sdkMP))
		}},
		{"sdk-span-alone", func(m inventory.StockManager) (inventory.StockManager, error) {
			return spanAlone{m, sdkTP.Tracer(otelstock.ScopeName)}, nil
		}},
		{"sdk-span-syncer", func(m inventory.StockManager) (inventory.StockManager, error) {
			return spanAlone{m, syncTP.Tracer(otelstock.ScopeName)}, nil
		}},
		{"sdk-span-noprocessor", func(m inventory.StockManager) (inventory.StockManager, error) {
			return spanAlone{m, bareTP.Tracer(otelstock.ScopeName)}, nil
		}},
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

// spanAlone makes the span otelstock makes around each Reduce (its name,
// kind and attributes) and nothing else: the SDK's own cost per span, under
// which no wrapper that makes one can go.
type spanAlone struct {
	inventory.StockManager
	tracer trace.Tracer
}

var (
	clientKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	attrBufs   = sync.Pool{New: func() any { return new([5]attribute.KeyValue) }}
)

// Reduce allocates nothing of its own (the options made once, the
// attributes' buffer pooled), as the wrapper does.
func (s spanAlone) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	ctx, span := s.tracer.Start(ctx, "inventory reduce", clientKind...)
	n, err := s.StockManager.Reduce(ctx, sku, qty, opts...)
	buf := attrBufs.Get().(*[5]attribute.KeyValue)
	*buf = [5]attribute.KeyValue{otelstock.KeyStrategy.String("luascript"), otelstock.KeyOutcome.String("ok"),
		otelstock.KeySKU.String(sku), otelstock.KeyQty.Int64(qty), otelstock.KeyRemaining.Int64(n)}
	span.SetAttributes(buf[:]...)
	*buf = [5]attribute.KeyValue{}
	attrBufs.Put(buf)
	span.End()
	return n, err
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
	runCalls(b, g, 4*g, call(bare)) // warm the pool up
	runCalls(b, g, 4*g, call(decorated))
	rounds := max(b.N/perRound, 5)
	n := perRound
	var ratios []float64
	var bareTime, decTime time.Duration
	b.ResetTimer()
	for r := range rounds {
		var tb, td time.Duration
		if r%2 == 0 {
			tb = runCalls(b, g, n, call(bare))
			td = runCalls(b, g, n, call(decorated))
		} else {
			td = runCalls(b, g, n, call(decorated))
			tb = runCalls(b, g, n, call(bare))
		}
		ratios = append(ratios, float64(td)/float64(tb))
		bareTime, decTime = bareTime+tb, decTime+td
	}
	b.StopTimer()
	calls := float64(rounds * n)
	reportRatios(b, ratios, "rounds")
	b.ReportMetric(float64(bareTime.Nanoseconds())/calls, "bare-ns/call")
	b.ReportMetric(float64(decTime.Nanoseconds())/calls, "decorated-ns/call")
	b.ReportMetric(float64((decTime-bareTime).Nanoseconds())/calls, "added-ns/call")
}

// reportRatios sorts ratios (one per round or block, named by unit) and
// reports their median, quartiles and extremes, and how many there are, in
// place of ns/op.
func reportRatios(b *testing.B, ratios []float64, unit string) {
	slices.Sort(ratios)
	k := len(ratios)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ratios[k/2], "ratio-median")
	b.ReportMetric(ratios[k/4], "ratio-q1")
	b.ReportMetric(ratios[k*3/4], "ratio-q3")
	b.ReportMetric(ratios[0], "ratio-min")
	b.ReportMetric(ratios[k-1], "ratio-max")
	b.ReportMetric(float64(k), unit)
}

// paired makes b.N pairs of Reduce calls from one goroutine, one of the
// bare manager and one of the decorated, in alternating order, and times
// each call, so that the two calls of a pair see the same machine. It
// reports, over blocks of 500 pairs, the median ratio of the decorated
// calls' median latency to the bare ones' (with the quartiles and the
// extremes of the blocks' ratios), and the medians' difference: the
// latency the decorator adds to a call.
func paired(b *testing.B, bare, decorated inventory.StockManager, sku string) {
	ctx := context.Background()
	for range 200 { // warm up
		_, _ = bare.Reduce(ctx, sku, 1)
		_, _ = decorated.Reduce(ctx, sku, 1)
	}
	const block = 500
	n := max(b.N, 5*block)
	db, dd := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	timed := func(m inventory.StockManager) time.Duration {
		t0 := time.Now()
		if _, err := m.Reduce(ctx, sku, 1); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := range n {
		if i%2 == 0 {
			db = append(db, timed(bare))
			dd = append(dd, timed(decorated))
		} else {
			dd = append(dd, timed(decorated))
			db = append(db, timed(bare))
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	var ratios []float64
	for i := 0; i+block <= n; i += block {
		ratios = append(ratios, float64(median(dd[i:i+block]))/float64(median(db[i:i+block])))
	}
	reportRatios(b, ratios, "blocks")
	mb, md := median(db), median(dd)
	b.ReportMetric(float64(mb.Nanoseconds()), "bare-p50-ns")
	b.ReportMetric(float64(md.Nanoseconds()), "decorated-p50-ns")
	b.ReportMetric(float64((md - mb).Nanoseconds()), "added-ns")
}

// eachDecorator inits the SKU "bench" of bare with MaxStock units, then
// runs f as a sub-benchmark per decorator, named by it, with m the
// decorator over bare.
func eachDecorator(b *testing.B, bare inventory.StockManager, f func(b *testing.B, m inventory.StockManager)) {
	if err := bare.Init(context.Background(), "bench", inventory.MaxStock); err != nil {
		b.Fatal(err)
	}
	for _, d := range decorators(b) {
		b.Run(d.name, func(b *testing.B) {
			m, err := d.wrap(bare)
			if err != nil {
				b.Fatal(err)
			}
			f(b, m)
		})
	}
}

// BenchmarkOverhead measures each decorator over luascript on Redis (the
// ratio the targets are set on: OTel with a no-op provider under 2%, with
// the SDK under 10%), and over inventorytest.Memory, where no I/O hides the
// decorator's own CPU time.
func BenchmarkOverhead(b *testing.B) {
	// One caller, calls paired (the latency a call sees), and 64 callers
	// in alternating rounds (the throughput a saturated client sees).
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("luascript/callers=%d", g), func(b *testing.B) {
			c := testenv.Redis(b)
			bare, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(b, c)))
			if err != nil {
				b.Fatal(err)
			}
			eachDecorator(b, bare, func(b *testing.B, m inventory.StockManager) {
				if g == 1 {
					paired(b, bare, m, "bench")
				} else {
					overhead(b, g, 50*g, bare, m, "bench") // rounds of ~100 ms
				}
			})
		})
	}
	b.Run("memory", func(b *testing.B) {
		bare := inventorytest.NewMemory(0)
		eachDecorator(b, bare, func(b *testing.B, m inventory.StockManager) {
			overhead(b, 1, 5000, bare, m, "bench")
		})
	})
}

// runCalls makes n calls of op from g goroutines, each with its own random
// source, and returns the wall time they took.
func runCalls(b *testing.B, g, n int, op func(rng *mrand.Rand) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range g {
		rng := mrand.New(mrand.NewPCG(uint64(w), 1))
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(rng); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
