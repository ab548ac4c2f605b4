package otelstock_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/otelstock"
)

// BenchmarkCall is the CPU time and the allocations of one Reduce through
// the wrapper with the SDK (every span sampled, a batching processor, a
// metric reader) over inventorytest.Memory, beside the bare call and the
// span alone (what the SDK spends on the span the wrapper makes); run with
// -benchmem. cpu-ns/op is the process's CPU time per call (the span
// processor's goroutine and the GC included), steadier than ns/op on a
// loaded machine.
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
	})
	bare := inventorytest.NewMemory(0)
	if err := bare.Init(ctx, "bench", inventory.MaxStock); err != nil {
		b.Fatal(err)
	}
	m, err := otelstock.Wrap(bare, otelstock.WithTracerProvider(tp), otelstock.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	for _, side := range []struct {
		name string
		m    inventory.StockManager
	}{{"bare", bare}, {"otel-sdk", m}, {"sdk-span-alone", spanAlone{bare, tp.Tracer(otelstock.ScopeName)}}} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := side.m.Reduce(ctx, "bench", 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
