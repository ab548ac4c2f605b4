package bench

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/otelstock"
)

// BenchmarkOtel compares otelstock over luascript's Reduce with the
// canonical instrumentation of the same client, go-redis's own redisotel
// (issue 31.5: otelstock is to cost no more than it): the same call (an
// unkeyed Reduce, one script call each, WithMaxBatch(1), on 64 spread
// SKUs), the same SDK settings (a TracerProvider sampling every span, its
// batch processor handing them to an exporter that drops them; a
// MeterProvider with a manual reader, never collected), at 1 and 64
// goroutines, on one private redis-server.
//
//   - tracing: otelstock with no meter (a noop MeterProvider) against
//     redisotel.InstrumentTracing with its defaults (db.statement and the
//     caller's function, file and line on every span). Each makes one
//     span per call: otelstock's around Reduce, redisotel's around the
//     EVALSHA.
//   - tracing and metrics: otelstock with the SDK meter against
//     InstrumentTracing and InstrumentMetrics (their defaults) with it.
//
// The ratio is otelstock's ops/s over redisotel's: 1 or more meets the
// target.
func BenchmarkOtel(b *testing.B) {
	const prefix = "benchotel"
	plain := privateRedis(b, 256)
	// client is another client of plain's server, with its options.
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: plain.Options().Addr, PoolSize: 256, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		return c
	}
	traced, tracedMetrics := client(), client()

	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	manager := func(c redis.UniversalClient) inventory.StockManager {
		m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithKeyTTL(time.Minute), luascript.WithMaxBatch(1))
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	wrap := func(m inventory.StockManager, opts ...otelstock.Option) inventory.StockManager {
		w, err := otelstock.Wrap(m, append([]otelstock.Option{otelstock.WithTracerProvider(tp), otelstock.WithStrategy("luascript")}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	// redisotel instruments a client: traced gets tracing first, and
	// metrics too for the second group of rows.
	if err := redisotel.InstrumentTracing(traced, redisotel.WithTracerProvider(tp)); err != nil {
		b.Fatal(err)
	}
	if err := redisotel.InstrumentTracing(tracedMetrics, redisotel.WithTracerProvider(tp)); err != nil {
		b.Fatal(err)
	}
	if err := redisotel.InstrumentMetrics(tracedMetrics, redisotel.WithMeterProvider(mp)); err != nil {
		b.Fatal(err)
	}

	skus := spread.names("otel")
	base := manager(plain)
	reset := func(ctx context.Context) error {
		for _, s := range skus {
			if err := base.Init(ctx, s, inventory.MaxStock); err != nil {
				return err
			}
		}
		return nil
	}
	reduce := func(m inventory.StockManager) benchcmp.Op {
		return func(ctx context.Context, _ int, rng *rand.Rand) error {
			_, err := m.Reduce(ctx, pick(rng, skus), 1)
			return err
		}
	}
	rows := []struct {
		name            string
		otel, redis     inventory.StockManager
		otelSide, rSide string
	}{
		{"tracing", wrap(manager(plain), otelstock.WithMeterProvider(metricnoop.NewMeterProvider())), manager(traced),
			"otelstock tracing over luascript", "luascript on a client with redisotel tracing"},
		{"tracing and metrics", wrap(manager(plain), otelstock.WithMeterProvider(mp)), manager(tracedMetrics),
			"otelstock tracing and metrics over luascript", "luascript on a client with redisotel tracing and metrics"},
	}
	for _, r := range rows {
		for _, g := range []int{1, 64} {
			benchcmp.Run(b, benchcmp.Case{
				Group: "otelstock", Name: r.name + ", vs redisotel", Layout: spread.String(), Goroutines: g,
				Strategy: benchcmp.Side{Name: r.otelSide, Reset: reset, Op: reduce(r.otel)},
				Baseline: benchcmp.Side{Name: r.rSide, Reset: reset, Op: reduce(r.redis)},
			})
		}
	}
}
