package otelstock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sort"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/otelstock"
	"github.com/stockkit/inventory/ratelimit"
	"github.com/stockkit/inventory/slogstock"
)

// printCalls prints the inventory.client.operations points of rm.
func printCalls(rm metricdata.ResourceMetrics) {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != otelstock.MetricOperations {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				op, _ := dp.Attributes.Value(otelstock.KeyOperation)
				oc, _ := dp.Attributes.Value(otelstock.KeyOutcome)
				st, _ := dp.Attributes.Value(otelstock.KeyStrategy)
				lines = append(lines, fmt.Sprintf("%s %s %s: %d", st.AsString(), op.AsString(), oc.AsString(), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// Metrics of a manager, read here with a ManualReader; a service gives
// WithMeterProvider its own provider (a Prometheus or OTLP exporter).
func ExampleWrap() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	m, err := otelstock.Wrap(inventorytest.NewMemory(0), otelstock.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	_ = m.Init(ctx, "sneaker-42", 2)
	for range 3 {
		_, _ = m.Reduce(ctx, "sneaker-42", 1)
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	printCalls(rm)
	// Output:
	// inventorytest init ok: 1
	// inventorytest reduce insufficient: 1
	// inventorytest reduce ok: 2
}

// The documented way to stack the decorators: otelstock outermost, so that
// the metrics count what the rate limit refused (as contention); ratelimit
// next, so that a refused call costs nothing below it; slogstock innermost,
// so that it logs the backend's failures and contention, not one line per
// refusal of a burst.
func Example_compose() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	// A text logger without times, for a stable example.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))

	var m inventory.StockManager = inventorytest.NewMemory(0) // or luascript.New(...), rowlock.New(...)
	m, err := slogstock.Wrap(m, slogstock.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	// Each SKU: 2 calls at once, then 1 per second.
	if m, err = ratelimit.Wrap(m, ratelimit.WithPerSKU(1, 2)); err != nil {
		log.Fatal(err)
	}
	if m, err = otelstock.Wrap(m, otelstock.WithMeterProvider(mp)); err != nil {
		log.Fatal(err)
	}

	_ = m.Init(ctx, "sneaker-42", 100)
	for range 3 {
		_, err := m.Reduce(ctx, "sneaker-42", 1)
		if errors.Is(err, inventory.ErrContention) {
			fmt.Println("refused:", err)
		}
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	printCalls(rm)
	// Output:
	// refused: ratelimit: rate limited: reduce "sneaker-42" refused by the per-SKU limit: inventory: contention, gave up
	// inventorytest init ok: 1
	// inventorytest reduce contention: 1
	// inventorytest reduce ok: 2
}
