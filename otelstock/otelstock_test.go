package otelstock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/fakeorders"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/otelstock"
	"github.com/stockkit/inventory/ratelimit"
)

// probe is an SDK meter and tracer provider whose readings a test asserts.
type probe struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newProbe(t *testing.T) *probe {
	p := &probe{t: t, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	t.Cleanup(func() {
		_ = p.mp.Shutdown(context.Background())
		_ = p.tp.Shutdown(context.Background())
	})
	return p
}

func (p *probe) wrap(m inventory.StockManager, opts ...otelstock.Option) inventory.StockManager {
	w, err := otelstock.Wrap(m, append([]otelstock.Option{otelstock.WithMeterProvider(p.mp), otelstock.WithTracerProvider(p.tp)}, opts...)...)
	require.NoError(p.t, err)
	return w
}

func (p *probe) collect() metricdata.ResourceMetrics {
	var rm metricdata.ResourceMetrics
	require.NoError(p.t, p.reader.Collect(context.Background(), &rm))
	return rm
}

// matches reports whether set has every one of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum adds up the int64 points of metric name whose attributes include want.
func (p *probe) sum(name string, want ...attribute.KeyValue) int64 {
	p.t.Helper()
	var n int64
	found := false
	for _, sm := range p.collect().ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			found = true
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(p.t, ok, "%s is an int64 sum, not %T", name, m.Data)
			for _, dp := range sum.DataPoints {
				if matches(dp.Attributes, want) {
					n += dp.Value
				}
			}
		}
	}
	if !found {
		return -1
	}
	return n
}

// durations returns the count and the sum of the histogram points whose
// attributes include want.
func (p *probe) durations(want ...attribute.KeyValue) (count uint64, sum float64) {
	p.t.Helper()
	for _, sm := range p.collect().ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != otelstock.MetricDuration {
				continue
			}
			assert.Equal(p.t, "s", m.Unit)
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(p.t, ok)
			for _, dp := range h.DataPoints {
				if matches(dp.Attributes, want) {
					count += dp.Count
					sum += dp.Sum
				}
			}
		}
	}
	return count, sum
}

func op(name string) attribute.KeyValue      { return otelstock.KeyOperation.String(name) }
func outcome(name string) attribute.KeyValue { return otelstock.KeyOutcome.String(name) }

// failing answers Reduce with err.
type failing struct {
	*inventorytest.Memory
	err error
}

func (f failing) Reduce(context.Context, string, int64, ...inventory.Option) (int64, error) {
	return 0, f.err
}

func TestStockCalls(t *testing.T) {
	ctx := context.Background()
	p := newProbe(t)
	m := p.wrap(inventorytest.NewMemory(0))
	require.NoError(t, m.Init(ctx, "shoe", 5))
	_, err := m.Reduce(ctx, "shoe", 2, inventory.WithKey("ann"))
	require.NoError(t, err)
	_, err = m.Reduce(ctx, "shoe", 2, inventory.WithKey("ann"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	_, err = m.Reduce(ctx, "shoe", 9)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Reduce(ctx, "shoe", 3)
	require.NoError(t, err)
	_, err = m.Reduce(ctx, "hat", 1)
	require.ErrorIs(t, err, inventory.ErrNotFound)
	_, err = m.Reduce(ctx, "shoe", 0)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = m.Return(ctx, "shoe", 4)
	require.NoError(t, err)
	n, err := m.Get(ctx, "shoe")
	require.NoError(t, err)
	assert.EqualValues(t, 4, n)

	for _, tc := range []struct {
		op, outcome string
		want        int64
	}{
		{"init", "ok", 1},
		{"reduce", "ok", 2},
		{"reduce", "duplicate", 1},
		{"reduce", "insufficient", 1},
		{"reduce", "not_found", 1},
		{"reduce", "invalid", 1},
		{"reduce", "error", 0},
		{"return", "ok", 1},
		{"get", "ok", 1},
	} {
		assert.Equal(t, tc.want, p.sum(otelstock.MetricOperations, op(tc.op), outcome(tc.outcome)), "%s %s", tc.op, tc.outcome)
		count, _ := p.durations(op(tc.op), outcome(tc.outcome))
		assert.EqualValues(t, tc.want, count, "one duration per %s %s call", tc.op, tc.outcome)
	}
	assert.EqualValues(t, 9, p.sum(otelstock.MetricOperations), "nine calls in all")
	assert.EqualValues(t, 9, p.sum(otelstock.MetricOperations, otelstock.KeyStrategy.String("inventorytest")))
	_, total := p.durations()
	assert.Positive(t, total)
	assert.EqualValues(t, 5, p.sum(otelstock.MetricUnits, otelstock.KeyDirection.String("reduce")),
		"units taken: 2 + 3; the duplicate and the refusals moved none")
	assert.EqualValues(t, 4, p.sum(otelstock.MetricUnits, otelstock.KeyDirection.String("return")))
	assert.Zero(t, p.sum(otelstock.MetricActiveOperations), "nothing in flight")

	spans := p.spans.Ended()
	require.Len(t, spans, 9)
	s := spans[1]
	assert.Equal(t, "inventory reduce", s.Name())
	attrs := attribute.NewSet(s.Attributes()...)
	for _, kv := range []attribute.KeyValue{
		otelstock.KeySKU.String("shoe"), otelstock.KeyQty.Int64(2), otelstock.KeyKeyed.Bool(true),
		otelstock.KeyOutcome.String("ok"), otelstock.KeyStrategy.String("inventorytest"),
		otelstock.KeyRemaining.Int64(3),
	} {
		v, ok := attrs.Value(kv.Key)
		assert.True(t, ok && v == kv.Value, "span has %s=%v, got %v", kv.Key, kv.Value.String(), v.String())
	}
	_, hasKey := attrs.Value("inventory.key")
	assert.False(t, hasKey, "the key itself (a buyer id) is not recorded")
	insufficient := attribute.NewSet(spans[3].Attributes()...)
	v, _ := insufficient.Value(otelstock.KeyOutcome)
	assert.Equal(t, "insufficient", v.AsString())
	assert.Equal(t, codes.Unset, spans[3].Status().Code, "sold out is not an error")
}

func TestFailures(t *testing.T) {
	ctx := context.Background()
	p := newProbe(t)
	down := p.wrap(failing{inventorytest.NewMemory(0), errors.New("dial tcp: connection refused")})
	busy := p.wrap(failing{inventorytest.NewMemory(0), fmt.Errorf("lock: %w", inventory.ErrContention)}, otelstock.WithStrategy("busy"))
	_, err := down.Reduce(ctx, "x", 1)
	require.Error(t, err)
	_, err = busy.Reduce(ctx, "x", 1)
	require.ErrorIs(t, err, inventory.ErrContention)
	assert.EqualValues(t, 1, p.sum(otelstock.MetricOperations, outcome("error"), otelstock.KeyStrategy.String("otelstock_test")),
		"the strategy is named after the wrapped type's package")
	assert.EqualValues(t, 1, p.sum(otelstock.MetricOperations, outcome("contention"), otelstock.KeyStrategy.String("busy")))
	spans := p.spans.Ended()
	require.Len(t, spans, 2)
	for _, s := range spans {
		assert.Equal(t, codes.Error, s.Status().Code, s.Name())
		require.NotEmpty(t, s.Events(), "the error is recorded")
		assert.Equal(t, "exception", s.Events()[0].Name)
	}
}

// blocking's Reduce waits until release is closed.
type blocking struct {
	*inventorytest.Memory
	started chan struct{}
	release chan struct{}
}

func (b blocking) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	b.started <- struct{}{}
	<-b.release
	return b.Memory.Reduce(ctx, sku, qty, opts...)
}

func TestInFlight(t *testing.T) {
	ctx := context.Background()
	p := newProbe(t)
	inner := blocking{inventorytest.NewMemory(0), make(chan struct{}), make(chan struct{})}
	m := p.wrap(inner)
	require.NoError(t, m.Init(ctx, "shoe", 10))
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _, _ = m.Reduce(ctx, "shoe", 1) })
		<-inner.started
	}
	assert.EqualValues(t, 3, p.sum(otelstock.MetricActiveOperations, op("reduce")), "three calls in flight")
	close(inner.release)
	wg.Wait()
	assert.Zero(t, p.sum(otelstock.MetricActiveOperations, op("reduce")))
	assert.EqualValues(t, 3, p.sum(otelstock.MetricUnits))
}

// The duration recorded is the span's, to the nanosecond.
func TestDurationIsTheSpans(t *testing.T) {
	p := newProbe(t)
	m := p.wrap(inventorytest.NewMemory(0))
	require.NoError(t, m.Init(context.Background(), "shoe", 5))
	spans := p.spans.Ended()
	require.Len(t, spans, 1)
	d := spans[0].EndTime().Sub(spans[0].StartTime())
	require.Positive(t, d)
	count, sum := p.durations(op("init"))
	assert.EqualValues(t, 1, count)
	assert.InDelta(t, d.Seconds(), sum, 1e-9)
}

// countingProvider counts the callbacks registered on its meter, and
// unregistered. Its meter is a pointer, or a struct value if byValue.
type countingProvider struct {
	metric.MeterProvider
	byValue                  bool
	registered, unregistered *atomic.Int32
	meter                    *countingMeter
}

func newCountingProvider(mp metric.MeterProvider, byValue bool) *countingProvider {
	p := &countingProvider{MeterProvider: mp, byValue: byValue, registered: new(atomic.Int32), unregistered: new(atomic.Int32)}
	p.meter = &countingMeter{mp.Meter(otelstock.ScopeName), p}
	return p
}

func (p *countingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	if p.byValue {
		return *p.meter
	}
	return p.meter
}

type countingMeter struct {
	metric.Meter
	p *countingProvider
}

func (m countingMeter) RegisterCallback(f metric.Callback, insts ...metric.Observable) (metric.Registration, error) {
	reg, err := m.Meter.RegisterCallback(f, insts...)
	m.p.registered.Add(1)
	return countingRegistration{reg, m.p.unregistered}, err
}

type countingRegistration struct {
	metric.Registration
	n *atomic.Int32
}

func (r countingRegistration) Unregister() error {
	r.n.Add(1)
	return r.Registration.Unregister()
}

// Wrappers of one meter provider and strategy share their counters: one
// callback however often the manager is wrapped, and a dropped wrapper's
// calls stay counted.
func TestCountsShared(t *testing.T) {
	ctx := context.Background()
	p := newProbe(t)
	cp := newCountingProvider(p.mp, false)
	wrap := func(strategy string) inventory.StockManager {
		w, err := otelstock.Wrap(inventorytest.NewMemory(0), otelstock.WithMeterProvider(cp),
			otelstock.WithTracerProvider(p.tp), otelstock.WithStrategy(strategy))
		require.NoError(t, err)
		return w
	}
	for range 100 {
		require.NoError(t, wrap("a").Init(ctx, "x", 1))
	}
	require.NoError(t, wrap("b").Init(ctx, "x", 1))
	assert.EqualValues(t, 2, cp.registered.Load(), "one callback per strategy")
	runtime.GC()
	runtime.GC()
	assert.EqualValues(t, 100, p.sum(otelstock.MetricOperations, otelstock.KeyStrategy.String("a"), op("init")),
		"the dropped wrappers' calls are counted")
	assert.EqualValues(t, 1, p.sum(otelstock.MetricOperations, otelstock.KeyStrategy.String("b")))
	assert.Zero(t, cp.unregistered.Load())
}

// Under a meter that is not a pointer, each wrapper has its own callback,
// unregistered once the wrapper is unreachable, so that wrapping often
// leaks nothing into the provider (fails without the cleanup).
func TestCallbackReleasedUnderValueMeter(t *testing.T) {
	ctx := context.Background()
	p := newProbe(t)
	cp := newCountingProvider(p.mp, true)
	kept, err := otelstock.Wrap(inventorytest.NewMemory(0), otelstock.WithMeterProvider(cp), otelstock.WithTracerProvider(p.tp))
	require.NoError(t, err)
	require.NoError(t, kept.Init(ctx, "x", 1))
	for range 10 {
		dropped, err := otelstock.Wrap(inventorytest.NewMemory(0), otelstock.WithMeterProvider(cp), otelstock.WithTracerProvider(p.tp))
		require.NoError(t, err)
		require.NoError(t, dropped.Init(ctx, "x", 1))
	}
	assert.EqualValues(t, 11, cp.registered.Load())
	assert.Eventually(t, func() bool {
		runtime.GC()
		return cp.unregistered.Load() == 10
	}, 5*time.Second, 10*time.Millisecond)
	assert.EqualValues(t, 1, p.sum(otelstock.MetricOperations, op("init")), "the kept wrapper reports its call")
	runtime.KeepAlive(kept)
}

func TestOrders(t *testing.T) {
	ctx := context.Background()
	p := newProbe(t)
	// Memory has the order calls; a struct that embeds only its
	// StockManager has not.
	stockOnly := struct{ inventory.StockManager }{inventorytest.NewMemory(0)}
	_, ok := p.wrap(stockOnly).(inventory.OrderManager)
	assert.False(t, ok, "a manager without orders stays without")
	_, ok = p.wrap(inventorytest.NewMemory(0)).(inventory.OrderManager)
	assert.True(t, ok, "a manager with orders keeps them")

	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	inner := fakeorders.New(clock)
	m := p.wrap(inner)
	om, ok := m.(inventory.OrderManager)
	require.True(t, ok, "the wrapper keeps the order calls visible")
	require.NoError(t, m.Init(ctx, "a", 10))
	require.NoError(t, m.Init(ctx, "b", 10))
	lines := []inventory.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}}
	require.NoError(t, om.ReduceLines(ctx, lines))
	err := om.ReduceLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 99}})
	var short *inventory.InsufficientError
	require.ErrorAs(t, err, &short)
	require.NoError(t, om.ReturnLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}}))
	require.NoError(t, om.Reserve(ctx, "h1", lines, time.Minute))
	require.NoError(t, om.Reserve(ctx, "h2", []inventory.Line{{SKU: "a", Qty: 1}}, time.Minute))
	require.NoError(t, om.Reserve(ctx, "h3", []inventory.Line{{SKU: "b", Qty: 4}}, time.Second))
	require.ErrorIs(t, om.Reserve(ctx, "h1", lines, time.Minute), inventory.ErrDuplicate)
	require.NoError(t, om.Confirm(ctx, "h1"))
	require.ErrorIs(t, om.Cancel(ctx, "h1"), inventory.ErrHoldConfirmed)
	require.NoError(t, om.Cancel(ctx, "h2"))
	held, err := om.Held(ctx, "b")
	require.NoError(t, err)
	assert.EqualValues(t, 4, held)
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	released, err := om.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, released)
	require.ErrorIs(t, om.Confirm(ctx, "h3"), inventory.ErrHoldReleased)

	for _, tc := range []struct {
		op, outcome string
		want        int64
	}{
		{"reduce_lines", "ok", 1}, {"reduce_lines", "insufficient", 1}, {"return_lines", "ok", 1},
		{"reserve", "ok", 3}, {"reserve", "duplicate", 1},
		{"confirm", "ok", 1}, {"confirm", "released", 1},
		{"cancel", "confirmed", 1}, {"cancel", "ok", 1},
		{"held", "ok", 1}, {"sweep", "ok", 1},
	} {
		assert.Equal(t, tc.want, p.sum(otelstock.MetricOperations, op(tc.op), outcome(tc.outcome)), "%s %s", tc.op, tc.outcome)
	}
	assert.EqualValues(t, 5, p.sum(otelstock.MetricUnits, op("reduce_lines")), "2+3 units; the refused call moved none")
	assert.EqualValues(t, 1, p.sum(otelstock.MetricUnits, op("return_lines")))
	assert.EqualValues(t, 5+1+4, p.sum(otelstock.MetricHeldUnits), "units of the three holds placed")
	assert.EqualValues(t, 1, p.sum(otelstock.MetricReleasedHolds), "Sweep released h3")
	assert.EqualValues(t, 2, p.sum(otelstock.MetricOperations, otelstock.KeyStrategy.String("fakeorders"), op("init")))

	var reserve sdktrace.ReadOnlySpan
	for _, s := range p.spans.Ended() {
		if s.Name() == "inventory reserve" {
			reserve = s
			break
		}
	}
	require.NotNil(t, reserve)
	attrs := attribute.NewSet(reserve.Attributes()...)
	skus, _ := attrs.Value(otelstock.KeySKUs)
	assert.Equal(t, []string{"a", "b"}, skus.AsStringSlice())
	qty, _ := attrs.Value(otelstock.KeyQty)
	assert.EqualValues(t, 5, qty.AsInt64())
	id, _ := attrs.Value(otelstock.KeyHoldID)
	assert.Equal(t, "h1", id.AsString())
}

func TestOptions(t *testing.T) {
	m := inventorytest.NewMemory(0)
	for name, opts := range map[string][]otelstock.Option{
		"nil tracer provider": {otelstock.WithTracerProvider(nil)},
		"nil meter provider":  {otelstock.WithMeterProvider(nil)},
		"empty strategy":      {otelstock.WithStrategy("")},
	} {
		_, err := otelstock.Wrap(m, opts...)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
	_, err := otelstock.Wrap(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	w, err := otelstock.Wrap(m, nil, otelstock.WithMeterProvider(metricnoop.NewMeterProvider()), otelstock.WithTracerProvider(tracenoop.NewTracerProvider()))
	require.NoError(t, err, "a nil option is ignored")
	require.NoError(t, w.Init(context.Background(), "x", 1))
}

// The strategy is named after the manager under other decorators.
func TestStrategyUnderDecorators(t *testing.T) {
	p := newProbe(t)
	limited, err := ratelimit.Wrap(inventorytest.NewMemory(0), ratelimit.WithPerSKU(1, 1))
	require.NoError(t, err)
	m := p.wrap(limited)
	require.NoError(t, m.Init(context.Background(), "x", 1))
	assert.EqualValues(t, 1, p.sum(otelstock.MetricOperations, otelstock.KeyStrategy.String("inventorytest")))
}

// Over a real strategy on a real Redis: a small sale, counted exactly.
func TestLuascriptOnRedis(t *testing.T) {
	c := testenv.Redis(t)
	inner, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	p := newProbe(t)
	m := p.wrap(inner)
	ctx := context.Background()
	require.NoError(t, m.Init(ctx, "sneaker", 5))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { _, _ = m.Reduce(ctx, "sneaker", 1, inventory.WithKey(fmt.Sprint("buyer-", i%15))) })
	}
	wg.Wait()
	strategy := otelstock.KeyStrategy.String("luascript")
	assert.EqualValues(t, 5, p.sum(otelstock.MetricOperations, strategy, op("reduce"), outcome("ok")))
	assert.EqualValues(t, 20, p.sum(otelstock.MetricOperations, strategy, op("reduce")))
	assert.EqualValues(t, 5, p.sum(otelstock.MetricUnits, strategy))
	assert.Zero(t, p.sum(otelstock.MetricOperations, outcome("error")))
	assert.EqualValues(t, 20-5, p.sum(otelstock.MetricOperations, op("reduce"), outcome("insufficient"))+
		p.sum(otelstock.MetricOperations, op("reduce"), outcome("duplicate")))
	left, err := m.Get(ctx, "sneaker")
	require.NoError(t, err)
	assert.Zero(t, left)
	assert.Len(t, p.spans.Ended(), 1+20+1)
}
