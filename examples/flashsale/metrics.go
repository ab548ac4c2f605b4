package main

import (
	"context"
	"fmt"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/otelstock"
)

// saleMetrics are what the otelstock decorator counted during one sale,
// read from an OpenTelemetry SDK meter provider of the sale's own.
type saleMetrics struct {
	// Reduce calls by outcome: every attempt, retries included.
	Calls        int64 `json:"reduce_calls"`
	OK           int64 `json:"reduce_ok"`
	Insufficient int64 `json:"reduce_insufficient"`
	Duplicate    int64 `json:"reduce_duplicate"`
	Contention   int64 `json:"reduce_contention"`
	NotFound     int64 `json:"reduce_not_found"`
	Invalid      int64 `json:"reduce_invalid"`
	Errors       int64 `json:"reduce_error"`
	// Units is inventory.client.units in direction reduce.
	Units int64 `json:"units"`
	// Durations is the count of the duration histogram's reduce points:
	// one per call.
	Durations uint64 `json:"durations"`
	// P50MS and P99MS are estimated from the duration histogram's buckets
	// (the upper bound of the bucket the percentile falls in), in ms.
	P50MS float64 `json:"hist_p50_ms"`
	P99MS float64 `json:"hist_p99_ms"`
}

// saleMeter is the meter provider of one sale.
type saleMeter struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

// newSaleMeter wraps m in otelstock, recording into a provider of its own.
func newSaleMeter(m inventory.StockManager, strategy string) (*saleMeter, inventory.StockManager, error) {
	sm := &saleMeter{reader: sdkmetric.NewManualReader()}
	sm.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sm.reader))
	w, err := otelstock.Wrap(m, otelstock.WithMeterProvider(sm.mp), otelstock.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelstock.WithStrategy(strategy))
	if err != nil {
		sm.close()
		return nil, nil, err
	}
	return sm, w, nil
}

func (sm *saleMeter) close() { _ = sm.mp.Shutdown(context.Background()) }

// read collects the decorator's counters of Reduce.
func (sm *saleMeter) read(ctx context.Context) *saleMetrics {
	var rm metricdata.ResourceMetrics
	if err := sm.reader.Collect(ctx, &rm); err != nil {
		return nil
	}
	out := &saleMetrics{}
	isReduce := func(dp metricdata.DataPoint[int64]) bool {
		v, _ := dp.Attributes.Value(otelstock.KeyOperation)
		return v.AsString() == "reduce"
	}
	for _, scope := range rm.ScopeMetrics {
		for _, m := range scope.Metrics {
			switch m.Name {
			case otelstock.MetricOperations:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if !isReduce(dp) {
						continue
					}
					oc, _ := dp.Attributes.Value(otelstock.KeyOutcome)
					out.Calls += dp.Value
					switch oc.AsString() {
					case "ok":
						out.OK += dp.Value
					case "insufficient":
						out.Insufficient += dp.Value
					case "duplicate":
						out.Duplicate += dp.Value
					case "contention":
						out.Contention += dp.Value
					case "not_found":
						out.NotFound += dp.Value
					case "invalid":
						out.Invalid += dp.Value
					default:
						out.Errors += dp.Value
					}
				}
			case otelstock.MetricUnits:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if isReduce(dp) {
						out.Units += dp.Value
					}
				}
			case otelstock.MetricDuration:
				h := m.Data.(metricdata.Histogram[float64])
				var bounds []float64
				var counts []uint64
				for _, dp := range h.DataPoints {
					op, _ := dp.Attributes.Value(otelstock.KeyOperation)
					if op.AsString() != "reduce" {
						continue
					}
					out.Durations += dp.Count
					bounds = dp.Bounds
					if counts == nil {
						counts = make([]uint64, len(dp.BucketCounts))
					}
					for i, n := range dp.BucketCounts {
						counts[i] += n
					}
				}
				out.P50MS, out.P99MS = 1000*bucketPercentile(bounds, counts, 50), 1000*bucketPercentile(bounds, counts, 99)
			}
		}
	}
	return out
}

// bucketPercentile is the upper bound of the bucket in which the p-th
// percentile of a histogram falls (+Inf past the last bound; 0 if empty).
func bucketPercentile(bounds []float64, counts []uint64, p int) float64 {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := (total*uint64(p) + 99) / 100
	var seen uint64
	for i, n := range counts {
		if seen += n; seen >= rank {
			if i < len(bounds) {
				return bounds[i]
			}
			break
		}
	}
	return bounds[len(bounds)-1] * 10 // past the last bound: shown as 10x it
}

// check compares the decorator's counters with the sale's own, call by
// call: resolved is how many failed calls a later duplicate showed had
// bought (the decorator saw an error and a duplicate; the sale, a sale),
// qty the units of each purchase. It returns what disagrees, or "".
func (sm *saleMetrics) check(r result, resolved, qty int64) string {
	var bad []string
	agree := func(what string, decorator, sale int64) {
		if decorator != sale {
			bad = append(bad, fmt.Sprintf("%s: decorator %d, sale %d", what, decorator, sale))
		}
	}
	agree("calls (requests + retries)", sm.Calls, r.Requests+r.Retries)
	agree("durations recorded", int64(sm.Durations), sm.Calls)
	agree("units taken", sm.Units+resolved*qty, r.Sold)
	agree("buyers who bought", (sm.OK+resolved)*qty, r.Sold)
	agree("sold out", sm.Insufficient, r.Insufficient)
	agree("duplicates", sm.Duplicate, r.Duplicate+resolved)
	agree("failed calls (retried or given up)", sm.Contention+sm.Errors+sm.NotFound+sm.Invalid, r.Retries+r.Contention+r.Errors)
	return strings.Join(bad, "; ")
}
