// Package slogstock logs the failures of any [inventory.StockManager] (and
// of its [inventory.OrderManager], where it has one) with log/slog.
//
//	m, err := slogstock.Wrap(inner, slogstock.WithLogger(logger))
//
// What is logged, one record per call, with the attributes op, strategy,
// sku and qty (or skus and qty, the sum of the lines, for multi-SKU calls;
// hold for the hold calls), key (the idempotency key, when one was given),
// outcome, duration and err:
//
//	error        level ERROR  the backend failed, a timeout (INFO when ctx was
//	                          cancelled: the caller gave up, not the backend)
//	contention   level WARN   the strategy gave up (locks, retries); retryable
//	the verdicts level DEBUG  insufficient (sold out), duplicate, not_found,
//	                          invalid, released, confirmed: answers, not failures
//	ok           not logged
//
// The key of a flash sale is often the buyer's id, personal data in some
// deployments: [WithoutKeys] logs keyed=true in its place.
//
// Sold out is the point of a flash sale, not an error: it is logged at
// DEBUG, like the other verdicts, and only when the logger enables DEBUG.
// A call whose record would not be logged at the logger's level costs one
// Enabled check.
//
// The wrapper implements [inventory.OrderManager] exactly when the wrapped
// manager does.
package slogstock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/outcome"
	"github.com/stockkit/inventory/internal/unwrap"
)

// Option configures Wrap.
type Option func(*config)

type config struct {
	logger   *slog.Logger
	strategy string
	named    bool
	noKeys   bool
}

// WithLogger sets the logger. The default is slog.Default() at the time of
// Wrap; a nil logger is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithStrategy sets the strategy attribute. The default is the name of the
// package of the wrapped manager, found through the Unwrap methods of
// decorators. An empty name is refused.
func WithStrategy(name string) Option {
	return func(c *config) { c.strategy, c.named = name, true }
}

// WithoutKeys logs keyed=true instead of the idempotency key itself, for
// deployments where the key (a buyer id, say) is personal data. The
// default logs the key.
func WithoutKeys() Option {
	return func(c *config) { c.noKeys = true }
}

// Level is the level a call's outcome is logged at, and false when it is
// not logged (ok).
func Level(oc string) (slog.Level, bool) {
	switch oc {
	case outcome.OK:
		return 0, false
	case outcome.Error:
		return slog.LevelError, true
	case outcome.Contention:
		return slog.LevelWarn, true
	}
	return slog.LevelDebug, true
}

// logger is the wrapper.
type logger struct {
	inner    inventory.StockManager
	log      *slog.Logger
	strategy slog.Attr
	noKeys   bool
}

// Wrap returns m with its failures logged. The result implements
// [inventory.OrderManager] when m does. An out-of-range option makes Wrap
// return an error wrapping [inventory.ErrInvalidArgument].
func Wrap(m inventory.StockManager, opts ...Option) (inventory.StockManager, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: slogstock: nil manager", inventory.ErrInvalidArgument)
	}
	c := config{logger: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.logger == nil {
		return nil, fmt.Errorf("%w: slogstock: nil logger", inventory.ErrInvalidArgument)
	}
	strategy, err := unwrap.Name("slogstock", m, c.strategy, c.named)
	if err != nil {
		return nil, err
	}
	l := &logger{inner: m, log: c.logger, strategy: slog.String("strategy", strategy), noKeys: c.noKeys}
	if om, ok := m.(inventory.OrderManager); ok {
		return orders{l, om}, nil
	}
	return l, nil
}

// logged returns what call returns, logged as the call op when it fails;
// what, called only then, gives the call's own attributes.
func logged[T any](ctx context.Context, l *logger, op string, what func() []slog.Attr, call func() (T, error)) (T, error) {
	t0 := time.Now()
	v, err := call()
	if err != nil {
		l.record(ctx, op, t0, err, what)
	}
	return v, err
}

// run is [logged] for a call that returns only an error.
func (l *logger) run(ctx context.Context, op string, what func() []slog.Attr, call func() error) error {
	_, err := logged(ctx, l, op, what, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// record logs the call op that started at t0 and returned err, if its
// outcome is logged at the logger's level; what adds the call's own
// attributes.
func (l *logger) record(ctx context.Context, op string, t0 time.Time, err error, what func() []slog.Attr) {
	oc := outcome.Of(err)
	level, ok := Level(oc)
	if oc == outcome.Error && errors.Is(err, context.Canceled) {
		level = slog.LevelInfo // the caller gave up: not the backend's failure
	}
	if !ok || !l.log.Enabled(ctx, level) {
		return
	}
	attrs := append([]slog.Attr{slog.String("op", op), l.strategy}, what()...)
	attrs = append(attrs, slog.String("outcome", oc), slog.Duration("duration", time.Since(t0)), slog.Any("err", err))
	msg := "inventory: " + op + " " + oc
	l.log.LogAttrs(ctx, level, msg, attrs...)
}

func (l *logger) single(sku string, qty int64, opts []inventory.Option) func() []slog.Attr {
	return func() []slog.Attr {
		return l.key([]slog.Attr{slog.String("sku", sku), slog.Int64("qty", qty)}, opts)
	}
}

func (l *logger) lines(ls []inventory.Line, opts []inventory.Option) func() []slog.Attr {
	return func() []slog.Attr {
		skus := make([]string, len(ls))
		var total int64
		for i, l := range ls {
			skus[i], total = l.SKU, total+l.Qty
		}
		return l.key([]slog.Attr{slog.Any("skus", skus), slog.Int64("qty", total)}, opts)
	}
}

// key appends the call's idempotency key to as, if it has one: the key, or
// keyed=true under WithoutKeys.
func (l *logger) key(as []slog.Attr, opts []inventory.Option) []slog.Attr {
	if len(opts) == 0 {
		return as
	}
	switch k := driver.Apply(opts).Key; {
	case k == "":
		return as
	case l.noKeys:
		return append(as, slog.Bool("keyed", true))
	default:
		return append(as, slog.String("key", k))
	}
}

// attr gives the attribute key=value of a call on one SKU or hold.
func attr(key, value string) func() []slog.Attr {
	return func() []slog.Attr { return []slog.Attr{slog.String(key, value)} }
}

// Unwrap returns the wrapped manager.
func (l *logger) Unwrap() inventory.StockManager { return l.inner }

// Init implements [inventory.StockManager].
func (l *logger) Init(ctx context.Context, sku string, qty int64) error {
	return l.run(ctx, "init", l.single(sku, qty, nil), func() error { return l.inner.Init(ctx, sku, qty) })
}

// Reduce implements [inventory.StockManager].
func (l *logger) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return logged(ctx, l, "reduce", l.single(sku, qty, opts), func() (int64, error) { return l.inner.Reduce(ctx, sku, qty, opts...) })
}

// Return implements [inventory.StockManager].
func (l *logger) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return logged(ctx, l, "return", l.single(sku, qty, opts), func() (int64, error) { return l.inner.Return(ctx, sku, qty, opts...) })
}

// Get implements [inventory.StockManager].
func (l *logger) Get(ctx context.Context, sku string) (int64, error) {
	return logged(ctx, l, "get", attr("sku", sku), func() (int64, error) { return l.inner.Get(ctx, sku) })
}

// orders is the wrapper of a manager that has the order calls.
type orders struct {
	*logger
	om inventory.OrderManager
}

// ReduceLines implements [inventory.OrderManager].
func (o orders) ReduceLines(ctx context.Context, ls []inventory.Line, opts ...inventory.Option) error {
	return o.run(ctx, "reduce_lines", o.lines(ls, opts), func() error { return o.om.ReduceLines(ctx, ls, opts...) })
}

// ReturnLines implements [inventory.OrderManager].
func (o orders) ReturnLines(ctx context.Context, ls []inventory.Line, opts ...inventory.Option) error {
	return o.run(ctx, "return_lines", o.lines(ls, opts), func() error { return o.om.ReturnLines(ctx, ls, opts...) })
}

// Reserve implements [inventory.OrderManager].
func (o orders) Reserve(ctx context.Context, id string, ls []inventory.Line, ttl time.Duration) error {
	what := func() []slog.Attr {
		return append(o.lines(ls, nil)(), slog.String("hold", id), slog.Duration("ttl", ttl))
	}
	return o.run(ctx, "reserve", what, func() error { return o.om.Reserve(ctx, id, ls, ttl) })
}

// Confirm implements [inventory.OrderManager].
func (o orders) Confirm(ctx context.Context, id string) error {
	return o.run(ctx, "confirm", attr("hold", id), func() error { return o.om.Confirm(ctx, id) })
}

// Cancel implements [inventory.OrderManager].
func (o orders) Cancel(ctx context.Context, id string) error {
	return o.run(ctx, "cancel", attr("hold", id), func() error { return o.om.Cancel(ctx, id) })
}

// Held implements [inventory.OrderManager].
func (o orders) Held(ctx context.Context, sku string) (int64, error) {
	return logged(ctx, o.logger, "held", attr("sku", sku), func() (int64, error) { return o.om.Held(ctx, sku) })
}

// Sweep implements [inventory.OrderManager].
func (o orders) Sweep(ctx context.Context) (int, error) {
	var n int
	return logged(ctx, o.logger, "sweep", func() []slog.Attr { return []slog.Attr{slog.Int("released", n)} },
		func() (int, error) {
			var err error
			n, err = o.om.Sweep(ctx)
			return n, err
		})
}

var (
	_ inventory.StockManager = (*logger)(nil)
	_ inventory.OrderManager = orders{}
)
