// Package otelstock records every call of an [inventory.StockManager] (and
// of its [inventory.OrderManager], where it has one) as an OpenTelemetry
// span and as metrics.
//
//	m, err := otelstock.Wrap(luascriptManager) // global providers
//	m, err := otelstock.Wrap(inner, otelstock.WithMeterProvider(mp), otelstock.WithTracerProvider(tp))
//
// The wrapper implements OrderManager exactly when the wrapped manager does,
// so a type assertion through it answers as it would without it.
//
// # Spans
//
// One span per call, of kind client, named "inventory " + the operation
// (e.g. "inventory reduce"), with the attributes inventory.strategy,
// inventory.outcome, inventory.sku and inventory.qty (single-SKU calls),
// inventory.skus and inventory.qty (the sum of the lines, multi-SKU calls),
// inventory.keyed=true (an idempotency key was given; the key itself, often
// a buyer id, is not recorded), inventory.remaining
// (Reduce and Return that answered a stock level), inventory.hold.id and
// inventory.released (Sweep). The span's status is Error for the outcomes
// error and contention, with the error recorded; sold out, duplicates and
// the other verdicts are answers, not failures.
//
// # Metrics
//
// Named in the style of OpenTelemetry's semantic conventions (seconds for
// durations, {curly} annotations for counts; a Prometheus exporter adds
// _total and _seconds):
//
//	inventory.client.operations          counter   {operation}  by operation, outcome, strategy
//	inventory.client.operation.duration  histogram s            by operation, outcome, strategy
//	inventory.client.active_operations   updown    {operation}  by operation, strategy: calls in flight (observable)
//	inventory.client.units               counter   {unit}       by operation, direction, strategy
//	inventory.client.held_units          counter   {unit}       by strategy
//	inventory.client.released_holds      counter   {hold}       by strategy
//
// The duration of a call is its span's (end time minus start time) when
// the span keeps its times, as the SDK's do; otherwise the wrapper reads
// the clock. The calls in flight are counted in atomics and observed at
// each collection (an asynchronous instrument), an operation from its
// first call on.
//
// Outcomes are ok, insufficient (ErrInsufficientStock), duplicate,
// contention (ErrContention, rate limits included), not_found, invalid,
// released (ErrHoldReleased), confirmed (ErrHoldConfirmed) and error
// (anything else: the backend failed, a timeout, ctx done).
//
// units counts the units moved by calls that took effect (outcome ok):
// Reduce and ReduceLines in direction reduce, Return and ReturnLines in
// direction return; a duplicate moved nothing and is not counted, and Init
// sets a level rather than moving units. held_units counts the units that
// Reserve calls put on hold. What becomes of a hold afterwards cannot be
// seen in units through the interface (Confirm, Cancel and Sweep name no
// quantity): Confirm and Cancel appear in operations by outcome, and
// released_holds counts the expired holds that Sweep calls released (the
// number Sweep returns; holds released lazily inside other calls are not
// reported by any call, so not counted).
//
// # Composing
//
// Each decorator of this module (otelstock, ratelimit, slogstock) wraps any
// StockManager, and they stack. The documented order puts otelstock
// outermost, so metrics count the calls the rate limit refused (as
// contention), and slogstock innermost, so a burst of refusals is not
// logged one line each:
//
//	logged, _ := slogstock.Wrap(m, slogstock.WithLogger(log))
//	limited, _ := ratelimit.Wrap(logged, ratelimit.WithPerSKU(100, 100))
//	observed, _ := otelstock.Wrap(limited, otelstock.WithMeterProvider(mp))
//
// See the package example.
package otelstock

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/outcome"
	"github.com/stockkit/inventory/internal/unwrap"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/stockkit/inventory/otelstock"

// Attribute keys of the spans and metrics.
const (
	KeyOperation = attribute.Key("inventory.operation")
	KeyOutcome   = attribute.Key("inventory.outcome")
	KeyStrategy  = attribute.Key("inventory.strategy")
	KeyDirection = attribute.Key("inventory.direction")
	KeySKU       = attribute.Key("inventory.sku")
	KeySKUs      = attribute.Key("inventory.skus")
	KeyQty       = attribute.Key("inventory.qty")
	KeyKeyed     = attribute.Key("inventory.keyed")
	KeyRemaining = attribute.Key("inventory.remaining")
	KeyHoldID    = attribute.Key("inventory.hold.id")
	KeyReleased  = attribute.Key("inventory.released")
)

// Metric names.
const (
	MetricOperations       = "inventory.client.operations"
	MetricDuration         = "inventory.client.operation.duration"
	MetricActiveOperations = "inventory.client.active_operations"
	MetricUnits            = "inventory.client.units"
	MetricHeldUnits        = "inventory.client.held_units"
	MetricReleasedHolds    = "inventory.client.released_holds"
)

// DurationBuckets are the histogram's bucket boundaries, in seconds: from
// 100µs (an in-process or nearby Redis call) to 10s.
var DurationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Option configures Wrap.
type Option func(*config)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	strategy string
	named    bool
}

// WithTracerProvider sets where the spans go. The default is
// otel.GetTracerProvider(), the global one; a nil provider is refused.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where the metrics go. The default is
// otel.GetMeterProvider(), the global one; a nil provider is refused.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithStrategy sets the inventory.strategy attribute. The default is the
// name of the package of the wrapped manager, found through the Unwrap
// methods of decorators ("luascript" for a luascript.Manager, even under a
// ratelimit wrapper). An empty name is refused.
func WithStrategy(name string) Option {
	return func(c *config) { c.strategy, c.named = name, true }
}

// The operations, the values of inventory.operation.
type op int

const (
	opInit op = iota
	opReduce
	opReturn
	opGet
	opReduceLines
	opReturnLines
	opReserve
	opConfirm
	opCancel
	opHeld
	opSweep
	numOps
)

var opNames = [numOps]string{"init", "reduce", "return", "get", "reduce_lines", "return_lines", "reserve", "confirm", "cancel", "held", "sweep"}

// Operations lists the values of inventory.operation.
func Operations() []string { return append([]string(nil), opNames[:]...) }

// Outcomes lists the values of inventory.outcome.
func Outcomes() []string { return append([]string(nil), outcome.All...) }

// instruments are shared by a wrapper and its order methods.
type instruments struct {
	inner    inventory.StockManager
	strategy string
	tracer   trace.Tracer

	calls    metric.Int64Counter
	duration metric.Float64Histogram
	active   metric.Int64ObservableUpDownCounter
	units    metric.Int64Counter
	held     metric.Int64Counter
	released metric.Int64Counter

	// The calls in flight, observed by the active instrument's callback.
	flight *flight

	// Measurement options and span attributes made once, so that a call
	// allocates none of them.
	byOutcome  [numOps][]measure
	moved      [numOps][]metric.AddOption
	plain      []metric.AddOption
	spanNames  [numOps]string
	strategyKV attribute.KeyValue
	outcomeKV  []attribute.KeyValue // by index in outcome.All
}

// flight counts the calls in flight by operation. The active instrument
// is asynchronous: a call adds to an atomic counter (two SDK measurements
// per call, with their attribute lookups and exemplars, cost a few hundred
// ns more), and a collection observes the counters. An operation is
// observed once it has been called, as a synchronous counter would report
// it.
type flight struct {
	n    [numOps]atomic.Int64
	seen [numOps]atomic.Bool
}

func (f *flight) add(o op, d int64) {
	if d > 0 && !f.seen[o].Load() {
		f.seen[o].Store(true)
	}
	f.n[o].Add(d)
}

// observe returns the callback reporting f on active, one point per
// operation called so far.
func (f *flight) observe(active metric.Int64ObservableUpDownCounter, byOp [numOps][]metric.ObserveOption) metric.Callback {
	return func(_ context.Context, o metric.Observer) error {
		for op := range numOps {
			if f.seen[op].Load() {
				o.ObserveInt64(active, f.n[op].Load(), byOp[op]...)
			}
		}
		return nil
	}
}

type measure struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// Wrap returns m recorded as spans and metrics. The result implements
// [inventory.OrderManager] when m does. An option out of range (a nil
// provider, an empty strategy) makes Wrap return an error wrapping
// [inventory.ErrInvalidArgument].
func Wrap(m inventory.StockManager, opts ...Option) (inventory.StockManager, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: otelstock: nil manager", inventory.ErrInvalidArgument)
	}
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider()}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.tp == nil:
		return nil, fmt.Errorf("%w: otelstock: nil tracer provider", inventory.ErrInvalidArgument)
	case c.mp == nil:
		return nil, fmt.Errorf("%w: otelstock: nil meter provider", inventory.ErrInvalidArgument)
	case c.named && c.strategy == "":
		return nil, fmt.Errorf("%w: otelstock: empty strategy name", inventory.ErrInvalidArgument)
	case !c.named:
		c.strategy = unwrap.Strategy(m)
	}
	in, err := newInstruments(m, c)
	if err != nil {
		return nil, err
	}
	if om, ok := m.(inventory.OrderManager); ok {
		return orders{in, om}, nil
	}
	return in, nil
}

func newInstruments(m inventory.StockManager, c config) (*instruments, error) {
	meter := c.mp.Meter(ScopeName)
	in := &instruments{inner: m, strategy: c.strategy, tracer: c.tp.Tracer(ScopeName)}
	var err error
	mk := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("otelstock: %w", e)
		}
	}
	var e error
	in.calls, e = meter.Int64Counter(MetricOperations, metric.WithUnit("{operation}"),
		metric.WithDescription("Stock calls, by operation and outcome."))
	mk(e)
	in.duration, e = meter.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of stock calls, by operation and outcome."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	mk(e)
	in.active, e = meter.Int64ObservableUpDownCounter(MetricActiveOperations, metric.WithUnit("{operation}"),
		metric.WithDescription("Stock calls in flight."))
	mk(e)
	in.units, e = meter.Int64Counter(MetricUnits, metric.WithUnit("{unit}"),
		metric.WithDescription("Units moved by stock calls that took effect, by direction."))
	mk(e)
	in.held, e = meter.Int64Counter(MetricHeldUnits, metric.WithUnit("{unit}"),
		metric.WithDescription("Units put on hold by Reserve calls that took effect."))
	mk(e)
	in.released, e = meter.Int64Counter(MetricReleasedHolds, metric.WithUnit("{hold}"),
		metric.WithDescription("Expired holds released by Sweep calls."))
	mk(e)
	if err != nil {
		return nil, err
	}
	strategy := KeyStrategy.String(c.strategy)
	in.strategyKV = strategy
	for _, oc := range outcome.All {
		in.outcomeKV = append(in.outcomeKV, KeyOutcome.String(oc))
	}
	var byOp [numOps][]metric.ObserveOption
	for o := range numOps {
		operation := KeyOperation.String(opNames[o])
		in.spanNames[o] = "inventory " + opNames[o]
		byOp[o] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(operation, strategy))}
		for _, oc := range outcome.All {
			set := metric.WithAttributeSet(attribute.NewSet(operation, strategy, KeyOutcome.String(oc)))
			in.byOutcome[o] = append(in.byOutcome[o], measure{add: []metric.AddOption{set}, record: []metric.RecordOption{set}})
		}
		dir := ""
		switch o {
		case opReduce, opReduceLines:
			dir = string(inventory.DirReduce)
		case opReturn, opReturnLines:
			dir = string(inventory.DirReturn)
		}
		if dir != "" {
			in.moved[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(operation, strategy, KeyDirection.String(dir)))}
		}
	}
	in.plain = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(strategy))}
	in.flight = new(flight)
	reg, err := meter.RegisterCallback(in.flight.observe(in.active, byOp), in.active)
	if err != nil {
		return nil, fmt.Errorf("otelstock: %w", err)
	}
	// The callback holds the counters, not the wrapper: once the wrapper
	// is unreachable, its callback is unregistered, so that wrapping often
	// (per request, say) leaks nothing into the provider.
	runtime.AddCleanup(in, func(r metric.Registration) { _ = r.Unregister() }, reg)
	return in, nil
}

// call is one call in progress, and what its span will say.
type call struct {
	in    *instruments
	op    op
	span  trace.Span
	t0    time.Time // when the span keeps no times
	timed timedSpan

	sku       string
	lines     []inventory.Line
	qty       int64 // the call's qty, or the sum of its lines
	keyed     bool
	remaining int64
	hasRemain bool
	hold      string
	released  int
}

func (in *instruments) begin(ctx context.Context, o op) (context.Context, call) {
	ctx, span := in.tracer.Start(ctx, in.spanNames[o], clientSpan...)
	in.flight.add(o, 1)
	c := call{in: in, op: o, span: span}
	if ts, ok := span.(timedSpan); ok {
		c.timed = ts
	} else {
		c.t0 = time.Now()
	}
	return ctx, c
}

// timedSpan is a span that keeps its start and end times (the SDK's): the
// call's duration is the span's, without reading the clock twice more.
type timedSpan interface {
	StartTime() time.Time
	EndTime() time.Time
}

// attrBufs are the buffers of the span attributes set at the end of a
// call (the SDK copies them), so that a call allocates no buffer.
var attrBufs = sync.Pool{New: func() any { return new([8]attribute.KeyValue) }}

// end records the call's outcome; moved is the units it moved (or held)
// if it took effect. The span ends first, so that the metrics take its
// duration; they are recorded in ctx, the span's, for exemplars.
func (c *call) end(ctx context.Context, err error, moved int64) {
	in := c.in
	oc := outcome.Of(err)
	oi := outcomeIndex(oc)
	if c.span.IsRecording() {
		c.setAttributes(err, oc, oi)
	}
	c.span.End()
	var d time.Duration
	if c.timed != nil {
		// Defensive: a span that End did not end now (someone ended it
		// before) has no end time of this call.
		start := c.timed.StartTime()
		if et := c.timed.EndTime(); et.After(start) {
			d = et.Sub(start)
		} else {
			d = time.Since(start)
		}
	} else {
		d = time.Since(c.t0)
	}
	ms := in.byOutcome[c.op][oi]
	in.calls.Add(ctx, 1, ms.add...)
	in.duration.Record(ctx, d.Seconds(), ms.record...)
	in.flight.add(c.op, -1)
	if err == nil && moved > 0 {
		switch {
		case in.moved[c.op] != nil:
			in.units.Add(ctx, moved, in.moved[c.op]...)
		case c.op == opReserve:
			in.held.Add(ctx, moved, in.plain...)
		}
	}
}

// setAttributes gives the span what it says of the call; oc is the
// outcome, oi its index in outcome.All.
func (c *call) setAttributes(err error, oc string, oi int) {
	in := c.in
	buf := attrBufs.Get().(*[8]attribute.KeyValue)
	// The operation is in the span's name; keyed only when true.
	attrs := append(buf[:0], in.strategyKV, in.outcomeKV[oi])
	switch {
	case c.sku != "":
		attrs = append(attrs, KeySKU.String(c.sku))
	case c.lines != nil:
		skus := make([]string, len(c.lines))
		for i, l := range c.lines {
			skus[i] = l.SKU
		}
		attrs = append(attrs, KeySKUs.StringSlice(skus))
	}
	if c.qty != 0 {
		attrs = append(attrs, KeyQty.Int64(c.qty))
	}
	if c.keyed {
		attrs = append(attrs, KeyKeyed.Bool(true))
	}
	if c.hasRemain && (oc == outcome.OK || oc == outcome.Insufficient || oc == outcome.Duplicate) {
		attrs = append(attrs, KeyRemaining.Int64(c.remaining))
	}
	if c.hold != "" {
		attrs = append(attrs, KeyHoldID.String(c.hold))
	}
	if c.op == opSweep {
		attrs = append(attrs, KeyReleased.Int(c.released))
	}
	c.span.SetAttributes(attrs...)
	clear(attrs) // hold no SKU in the pool
	attrBufs.Put(buf)
	if outcome.Failed(oc) {
		c.span.RecordError(err)
		c.span.SetStatus(codes.Error, err.Error())
	}
}

var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// outcomeIndex is the index of oc in outcome.All.
func outcomeIndex(oc string) int {
	for i, o := range outcome.All {
		if o == oc {
			return i
		}
	}
	return len(outcome.All) - 1
}

func keyed(opts []inventory.Option) bool {
	return len(opts) > 0 && inventory.Apply(opts).Key != ""
}

func (c *call) setLines(lines []inventory.Line, opts []inventory.Option) int64 {
	var total int64
	for _, l := range lines {
		total += l.Qty
	}
	c.lines, c.qty, c.keyed = lines, total, keyed(opts)
	return total
}

// Unwrap returns the wrapped manager.
func (in *instruments) Unwrap() inventory.StockManager { return in.inner }

// Init implements [inventory.StockManager].
func (in *instruments) Init(ctx context.Context, sku string, qty int64) error {
	ctx, c := in.begin(ctx, opInit)
	c.sku, c.qty = sku, qty
	err := in.inner.Init(ctx, sku, qty)
	c.end(ctx, err, 0)
	return err
}

// Reduce implements [inventory.StockManager].
func (in *instruments) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	ctx, c := in.begin(ctx, opReduce)
	c.sku, c.qty, c.keyed = sku, qty, keyed(opts)
	n, err := in.inner.Reduce(ctx, sku, qty, opts...)
	c.remaining, c.hasRemain = n, true
	c.end(ctx, err, qty)
	return n, err
}

// Return implements [inventory.StockManager].
func (in *instruments) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	ctx, c := in.begin(ctx, opReturn)
	c.sku, c.qty, c.keyed = sku, qty, keyed(opts)
	n, err := in.inner.Return(ctx, sku, qty, opts...)
	c.remaining, c.hasRemain = n, true
	c.end(ctx, err, qty)
	return n, err
}

// Get implements [inventory.StockManager].
func (in *instruments) Get(ctx context.Context, sku string) (int64, error) {
	ctx, c := in.begin(ctx, opGet)
	c.sku = sku
	n, err := in.inner.Get(ctx, sku)
	c.end(ctx, err, 0)
	return n, err
}

// orders is the wrapper of a manager that has the order calls.
type orders struct {
	*instruments
	om inventory.OrderManager
}

// ReduceLines implements [inventory.OrderManager].
func (o orders) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	ctx, c := o.begin(ctx, opReduceLines)
	total := c.setLines(lines, opts)
	err := o.om.ReduceLines(ctx, lines, opts...)
	c.end(ctx, err, total)
	return err
}

// ReturnLines implements [inventory.OrderManager].
func (o orders) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	ctx, c := o.begin(ctx, opReturnLines)
	total := c.setLines(lines, opts)
	err := o.om.ReturnLines(ctx, lines, opts...)
	c.end(ctx, err, total)
	return err
}

// Reserve implements [inventory.OrderManager].
func (o orders) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	ctx, c := o.begin(ctx, opReserve)
	total := c.setLines(lines, nil)
	c.hold = id
	err := o.om.Reserve(ctx, id, lines, ttl)
	c.end(ctx, err, total)
	return err
}

// Confirm implements [inventory.OrderManager].
func (o orders) Confirm(ctx context.Context, id string) error {
	ctx, c := o.begin(ctx, opConfirm)
	c.hold = id
	err := o.om.Confirm(ctx, id)
	c.end(ctx, err, 0)
	return err
}

// Cancel implements [inventory.OrderManager].
func (o orders) Cancel(ctx context.Context, id string) error {
	ctx, c := o.begin(ctx, opCancel)
	c.hold = id
	err := o.om.Cancel(ctx, id)
	c.end(ctx, err, 0)
	return err
}

// Held implements [inventory.OrderManager].
func (o orders) Held(ctx context.Context, sku string) (int64, error) {
	ctx, c := o.begin(ctx, opHeld)
	c.sku = sku
	n, err := o.om.Held(ctx, sku)
	c.end(ctx, err, 0)
	return n, err
}

// Sweep implements [inventory.OrderManager].
func (o orders) Sweep(ctx context.Context) (int, error) {
	ctx, c := o.begin(ctx, opSweep)
	n, err := o.om.Sweep(ctx)
	if n > 0 {
		o.released.Add(ctx, int64(n), o.plain...)
	}
	c.released = n
	c.end(ctx, err, 0)
	return n, err
}

var (
	_ inventory.StockManager = (*instruments)(nil)
	_ inventory.OrderManager = orders{}
)
