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
// error and contention, with the error recorded and the error.type
// attribute of OpenTelemetry's semantic conventions; sold out, duplicates
// and the other verdicts are answers, not failures, and leave the status
// unset, as a success does.
//
// error.type is one of: contention (ErrContention: locks, retries, a rate
// limit); timeout (a deadline passed: context.DeadlineExceeded or a
// network timeout); canceled (the caller's ctx was cancelled); otherwise the
// type of the innermost error with a type of its own in the chain the
// backend returned, as semconv.ErrorType names it ("*net.OpError",
// "*pgconn.PgError"), or _OTHER when the chain has none (errors.New and
// fmt.Errorf all the way down).
//
// Where the backend is known, the spans and the duration histogram carry
// db.system.name ([WithDBSystem]; luascript's is redis without it) and
// server.address and server.port ([WithServer]). The tracer and meter
// are named [ScopeName], with the version of this module in the program's
// build information ([Version]).
//
// # Metrics
//
// Named in the style of OpenTelemetry's semantic conventions (seconds for
// durations, {curly} annotations for counts; a Prometheus exporter adds
// _total and _seconds):
//
//	inventory.client.operations          counter   {operation}  by operation, outcome, strategy (observable)
//	inventory.client.operation.duration  histogram s            by operation, outcome, strategy
//	inventory.client.active_operations   updown    {operation}  by operation, strategy: calls in flight (observable)
//	inventory.client.units               counter   {unit}       by operation, direction, strategy (observable)
//	inventory.client.held_units          counter   {unit}       by strategy (observable)
//	inventory.client.released_holds      counter   {hold}       by strategy (observable)
//
// The duration of a call is its span's (end time minus start time) when
// the span keeps its times, as the SDK's do; otherwise the wrapper reads
// the clock. The histogram is the one measurement a call makes, in the
// span's context (so an exemplar can point to the trace); the counters
// and the calls in flight are atomics that each collection observes
// (asynchronous instruments), a point per attribute set from its first
// count on. Wrappers of the same meter provider and strategy share them,
// so a dropped wrapper's counts stay in the totals (except under a meter
// that is not a pointer, such as a no-op one).
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
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
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

// Attribute keys of OpenTelemetry's semantic conventions.
const (
	KeyErrorType     = attribute.Key("error.type")
	KeyDBSystem      = attribute.Key("db.system.name")
	KeyServerAddress = attribute.Key("server.address")
	KeyServerPort    = attribute.Key("server.port")
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
	system   string
	systemed bool // WithDBSystem was given
	address  string
	port     int
	server   bool
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

// WithDBSystem sets the db.system.name attribute, one of the values of
// OpenTelemetry's semantic conventions: "redis", "mariadb", "mysql",
// "postgresql", "sqlite". The default is "redis" for luascript, and none
// for the strategies whose backend the manager does not tell (the lock
// strategies over a Redis or SQL store, optimistic and rowlock on any
// engine, tiered on two). An empty name is refused.
func WithDBSystem(name string) Option {
	return func(c *config) { c.system, c.systemed = name, true }
}

// WithServer sets the server.address and server.port attributes: the
// backend's host name or IP address, and its port (1..65535). The default
// is none.
func WithServer(address string, port int) Option {
	return func(c *config) { c.address, c.port, c.server = address, port, true }
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
	duration metric.Float64Histogram

	// The counters, observed at each collection.
	counts *counts
	// The backend's attributes (db.system.name, server.*), on every span
	// and measurement.
	backend []attribute.KeyValue

	// Measurement options and span attributes made once, so that a call
	// allocates none of them.
	record     [numOps][][]metric.RecordOption // by operation, outcome index
	spanNames  [numOps]string
	strategyKV attribute.KeyValue
	outcomeKV  []attribute.KeyValue // by index in outcome.All
}

// counts are a strategy's counters under one meter (operations, units,
// held units, released holds, calls in flight), kept in atomics that each
// collection observes: the instruments are asynchronous, so that a call
// adds to an atomic where a synchronous counter would make an SDK
// measurement (a lookup of its attribute set, an exemplar offered) per
// counter per call. Only the duration histogram is measured per call
// (with its exemplar). Every wrapper of the same meter and strategy shares
// one counts, registered once, as the SDK shares a synchronous counter's
// sums: a dropped wrapper takes none of its counts away, and wrapping
// often (per request, say) adds no callbacks.
type counts struct {
	flight   [numOps]atomic.Int64
	seen     [numOps]atomic.Bool // called once: its in-flight point is reported
	calls    []atomic.Int64      // by operation*len(outcome.All) + outcome index
	units    [numOps]atomic.Int64
	held     atomic.Int64
	released atomic.Int64
}

func (c *counts) begin(o op) {
	if !c.seen[o].Load() {
		c.seen[o].Store(true)
	}
	c.flight[o].Add(1)
}

// shared holds the counts of the meters that are pointers (the SDK's and
// the global delegate's), by meter and strategy, for the life of the
// program: a few per provider and strategy.
var shared = struct {
	sync.Mutex
	m map[sharedKey]*counts
}{m: make(map[sharedKey]*counts)}

type sharedKey struct {
	meter    metric.Meter
	strategy string
}

// countsFor returns the counts of strategy under meter, registering them
// on first use. A meter that is not a pointer (a no-op one is a struct)
// gets counts of its own wrapper, unregistered once in is unreachable.
func countsFor(in *instruments, meter metric.Meter) (*counts, error) {
	if reflect.TypeOf(meter).Kind() != reflect.Pointer {
		c, reg, err := newCounts(meter, in.strategy)
		if err != nil {
			return nil, err
		}
		runtime.AddCleanup(in, func(r metric.Registration) { _ = r.Unregister() }, reg)
		return c, nil
	}
	shared.Lock()
	defer shared.Unlock()
	k := sharedKey{meter, in.strategy}
	if c := shared.m[k]; c != nil {
		return c, nil
	}
	c, _, err := newCounts(meter, in.strategy)
	if err != nil {
		return nil, err
	}
	shared.m[k] = c
	return c, nil
}

// newCounts makes the asynchronous instruments on meter and registers the
// callback that reports c on them, one point per attribute set counted so
// far (an operation in flight from its first call on).
func newCounts(meter metric.Meter, strategy string) (*counts, metric.Registration, error) {
	var err error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, e := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = cmp.Or(err, e)
		return c
	}
	calls := counter(MetricOperations, "{operation}", "Stock calls, by operation and outcome.")
	active, e := meter.Int64ObservableUpDownCounter(MetricActiveOperations, metric.WithUnit("{operation}"),
		metric.WithDescription("Stock calls in flight."))
	err = cmp.Or(err, e)
	units := counter(MetricUnits, "{unit}", "Units moved by stock calls that took effect, by direction.")
	held := counter(MetricHeldUnits, "{unit}", "Units put on hold by Reserve calls that took effect.")
	released := counter(MetricReleasedHolds, "{hold}", "Expired holds released by Sweep calls.")
	if err != nil {
		return nil, nil, fmt.Errorf("otelstock: %w", err)
	}
	no := len(outcome.All)
	c := &counts{calls: make([]atomic.Int64, int(numOps)*no)}
	strategyKV := KeyStrategy.String(strategy)
	with := func(kvs ...attribute.KeyValue) []metric.ObserveOption {
		return []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(append(kvs, strategyKV)...))}
	}
	var byOp, moved [numOps][]metric.ObserveOption
	byOutcome := make([][]metric.ObserveOption, len(c.calls))
	for o := range numOps {
		operation := KeyOperation.String(opNames[o])
		byOp[o] = with(operation)
		for i, oc := range outcome.All {
			byOutcome[int(o)*no+i] = with(operation, KeyOutcome.String(oc))
		}
		if dir := direction(o); dir != "" {
			moved[o] = with(operation, KeyDirection.String(dir))
		}
	}
	plain := with()
	reg, err := meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for o := range numOps {
			if c.seen[o].Load() {
				obs.ObserveInt64(active, c.flight[o].Load(), byOp[o]...)
			}
			if n := c.units[o].Load(); n > 0 {
				obs.ObserveInt64(units, n, moved[o]...)
			}
		}
		for i := range c.calls {
			if n := c.calls[i].Load(); n > 0 {
				obs.ObserveInt64(calls, n, byOutcome[i]...)
			}
		}
		if n := c.held.Load(); n > 0 {
			obs.ObserveInt64(held, n, plain...)
		}
		if n := c.released.Load(); n > 0 {
			obs.ObserveInt64(released, n, plain...)
		}
		return nil
	}, calls, active, units, held, released)
	if err != nil {
		return nil, nil, fmt.Errorf("otelstock: %w", err)
	}
	return c, reg, nil
}

// direction is the inventory.direction of the units o moves, or "".
func direction(o op) string {
	switch o {
	case opReduce, opReduceLines:
		return string(driver.DirReduce)
	case opReturn, opReturnLines:
		return string(driver.DirReturn)
	}
	return ""
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
	}
	var err error
	if c.strategy, err = unwrap.Name("otelstock", m, c.strategy, c.named); err != nil {
		return nil, err
	}
	if err := c.backend(); err != nil {
		return nil, err
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

// backend checks the backend's options and fills in the default system.
func (c *config) backend() error {
	switch {
	case c.systemed && c.system == "":
		return fmt.Errorf("%w: otelstock: empty db system name", inventory.ErrInvalidArgument)
	case c.server && (c.address == "" || c.port < 1 || c.port > 65535):
		return fmt.Errorf("%w: otelstock: WithServer(%q, %d): want an address and a port in 1..65535", inventory.ErrInvalidArgument, c.address, c.port)
	case c.system == "" && c.strategy == "luascript":
		c.system = "redis"
	}
	return nil
}

func (c config) attributes() []attribute.KeyValue {
	var kvs []attribute.KeyValue
	if c.system != "" {
		kvs = append(kvs, KeyDBSystem.String(c.system))
	}
	if c.server {
		kvs = append(kvs, KeyServerAddress.String(c.address), KeyServerPort.Int(c.port))
	}
	return kvs
}

// Version is the version of this module in the program's build
// information ("v1.2.3" where a program depends on a release; "(devel)"
// in this repository's own builds), the version of the instrumentation
// scope.
var Version = moduleVersion()

func moduleVersion() string {
	const path = "github.com/stockkit/inventory"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "(devel)"
}

func newInstruments(m inventory.StockManager, c config) (*instruments, error) {
	meter := c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	in := &instruments{inner: m, strategy: c.strategy, tracer: c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		backend: c.attributes()}
	var err error
	in.duration, err = meter.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of stock calls, by operation and outcome."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	if err != nil {
		return nil, fmt.Errorf("otelstock: %w", err)
	}
	if in.counts, err = countsFor(in, meter); err != nil {
		return nil, err
	}
	strategy := KeyStrategy.String(c.strategy)
	in.strategyKV = strategy
	for _, oc := range outcome.All {
		in.outcomeKV = append(in.outcomeKV, KeyOutcome.String(oc))
	}
	for o := range numOps {
		operation := KeyOperation.String(opNames[o])
		in.spanNames[o] = "inventory " + opNames[o]
		for _, oc := range outcome.All {
			kvs := append([]attribute.KeyValue{operation, strategy, KeyOutcome.String(oc)}, in.backend...)
			set := metric.WithAttributeSet(attribute.NewSet(kvs...))
			in.record[o] = append(in.record[o], []metric.RecordOption{set})
		}
	}
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
	in.counts.begin(o)
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
var attrBufs = sync.Pool{New: func() any { return new([12]attribute.KeyValue) }}

// end records the call's outcome; moved is the units it moved (or held)
// if it took effect. The span ends first, so that the histogram takes its
// duration, recorded in ctx, the span's, for exemplars.
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
	if outcome.Failed(oc) {
		in.duration.Record(ctx, d.Seconds(), in.failed(c.op, oc, err))
	} else {
		in.duration.Record(ctx, d.Seconds(), in.record[c.op][oi]...)
	}
	cs := in.counts
	cs.calls[int(c.op)*len(outcome.All)+oi].Add(1)
	cs.flight[c.op].Add(-1)
	if err == nil && moved > 0 {
		switch {
		case direction(c.op) != "":
			cs.units[c.op].Add(moved)
		case c.op == opReserve:
			cs.held.Add(moved)
		}
	}
}

// failed is the record option of a failed call: the attributes of its
// operation and outcome, and its error.type. It is made per call: a
// failure is not the hot path.
func (in *instruments) failed(o op, oc string, err error) metric.RecordOption {
	kvs := append([]attribute.KeyValue{KeyOperation.String(opNames[o]), in.strategyKV, KeyOutcome.String(oc), ErrorType(err)}, in.backend...)
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

// ErrorType returns the error.type attribute of a failed call's err (see
// the package documentation for its values).
func ErrorType(err error) attribute.KeyValue {
	if errors.Is(err, inventory.ErrContention) {
		return KeyErrorType.String("contention")
	}
	var nerr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout() {
		return KeyErrorType.String("timeout")
	}
	if errors.Is(err, context.Canceled) {
		return KeyErrorType.String("canceled")
	}
	typed := innermostTyped(err)
	if typed == nil {
		return semconv.ErrorTypeOther
	}
	return KeyErrorType.String(semconv.ErrorType(typed).Value.AsString())
}

// plain are the error types that name no class of failure: errors.New's,
// fmt.Errorf's wrappers, errors.Join's and this module's face's.
var plain = map[reflect.Type]bool{
	reflect.TypeOf(errors.New("")):                                      true,
	reflect.TypeOf(fmt.Errorf("%w", errors.New(""))):                    true,
	reflect.TypeOf(fmt.Errorf("%w %w", errors.New(""), errors.New(""))): true,
	reflect.TypeOf(errors.Join(errors.New(""))):                         true,
	reflect.TypeOf(&front.Error{}):                                      true,
}

// innermostTyped follows err's chain (the first of a join's) and returns
// the last error on it whose type is not plain, or nil.
func innermostTyped(err error) error {
	var typed error
	for err != nil {
		if !plain[reflect.TypeOf(err)] {
			typed = err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			es := u.Unwrap()
			if len(es) == 0 {
				return typed
			}
			err = es[0]
		default:
			return typed
		}
	}
	return typed
}

// setAttributes gives the span what it says of the call; oc is the
// outcome, oi its index in outcome.All.
func (c *call) setAttributes(err error, oc string, oi int) {
	in := c.in
	buf := attrBufs.Get().(*[12]attribute.KeyValue)
	// The operation is in the span's name; keyed only when true.
	attrs := append(append(buf[:0], in.strategyKV, in.outcomeKV[oi]), in.backend...)
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
		c.span.SetAttributes(ErrorType(err))
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
	return len(opts) > 0 && driver.Apply(opts).Key != ""
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
	return in.unitsCall(ctx, opReduce, sku, qty, opts, in.inner.Reduce)
}

// Return implements [inventory.StockManager].
func (in *instruments) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return in.unitsCall(ctx, opReturn, sku, qty, opts, in.inner.Return)
}

// unitsCall records the Reduce or Return (which) of qty units of sku
// that inner makes.
func (in *instruments) unitsCall(ctx context.Context, which op, sku string, qty int64, opts []inventory.Option,
	inner func(context.Context, string, int64, ...inventory.Option) (int64, error)) (int64, error) {
	ctx, c := in.begin(ctx, which)
	c.sku, c.qty, c.keyed = sku, qty, keyed(opts)
	n, err := inner(ctx, sku, qty, opts...)
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
	return o.linesCall(ctx, opReduceLines, lines, opts, o.om.ReduceLines)
}

// ReturnLines implements [inventory.OrderManager].
func (o orders) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return o.linesCall(ctx, opReturnLines, lines, opts, o.om.ReturnLines)
}

// linesCall records the ReduceLines or ReturnLines (which) of lines that
// inner makes.
func (o orders) linesCall(ctx context.Context, which op, lines []inventory.Line, opts []inventory.Option,
	inner func(context.Context, []inventory.Line, ...inventory.Option) error) error {
	ctx, c := o.begin(ctx, which)
	total := c.setLines(lines, opts)
	err := inner(ctx, lines, opts...)
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
	return o.holdCall(ctx, opConfirm, id, o.om.Confirm)
}

// Cancel implements [inventory.OrderManager].
func (o orders) Cancel(ctx context.Context, id string) error {
	return o.holdCall(ctx, opCancel, id, o.om.Cancel)
}

// holdCall records the Confirm or Cancel (which) of hold id that inner
// makes.
func (o orders) holdCall(ctx context.Context, which op, id string, inner func(context.Context, string) error) error {
	ctx, c := o.begin(ctx, which)
	c.hold = id
	err := inner(ctx, id)
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
		o.counts.released.Add(int64(n))
	}
	c.released = n
	c.end(ctx, err, 0)
	return n, err
}

var (
	_ inventory.StockManager = (*instruments)(nil)
	_ inventory.OrderManager = orders{}
)
