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
	switch {
	case c.logger == nil:
		return nil, fmt.Errorf("%w: slogstock: nil logger", inventory.ErrInvalidArgument)
	case c.named && c.strategy == "":
		return nil, fmt.Errorf("%w: slogstock: empty strategy name", inventory.ErrInvalidArgument)
	case !c.named:
		c.strategy = unwrap.Strategy(m)
	}
	l := &logger{inner: m, log: c.logger, strategy: slog.String("strategy", c.strategy), noKeys: c.noKeys}
	if om, ok := m.(inventory.OrderManager); ok {
		return orders{l, om}, nil
	}
	return l, nil
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

func attrs(as ...slog.Attr) func() []slog.Attr { return func() []slog.Attr { return as } }

// Unwrap returns the wrapped manager.
func (l *logger) Unwrap() inventory.StockManager { return l.inner }

// Init implements [inventory.StockManager].
func (l *logger) Init(ctx context.Context, sku string, qty int64) error {
	t0 := time.Now()
	err := l.inner.Init(ctx, sku, qty)
	if err != nil {
		l.record(ctx, "init", t0, err, l.single(sku, qty, nil))
	}
	return err
}

// Reduce implements [inventory.StockManager].
func (l *logger) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	t0 := time.Now()
	n, err := l.inner.Reduce(ctx, sku, qty, opts...)
	if err != nil {
		l.record(ctx, "reduce", t0, err, l.single(sku, qty, opts))
	}
	return n, err
}

// Return implements [inventory.StockManager].
func (l *logger) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	t0 := time.Now()
	n, err := l.inner.Return(ctx, sku, qty, opts...)
	if err != nil {
		l.record(ctx, "return", t0, err, l.single(sku, qty, opts))
	}
	return n, err
}

// Get implements [inventory.StockManager].
func (l *logger) Get(ctx context.Context, sku string) (int64, error) {
	t0 := time.Now()
	n, err := l.inner.Get(ctx, sku)
	if err != nil {
		l.record(ctx, "get", t0, err, attrs(slog.String("sku", sku)))
	}
	return n, err
}

// orders is the wrapper of a manager that has the order calls.
type orders struct {
	*logger
	om inventory.OrderManager
}

// ReduceLines implements [inventory.OrderManager].
func (o orders) ReduceLines(ctx context.Context, ls []inventory.Line, opts ...inventory.Option) error {
	t0 := time.Now()
	err := o.om.ReduceLines(ctx, ls, opts...)
	if err != nil {
		o.record(ctx, "reduce_lines", t0, err, o.lines(ls, opts))
	}
	return err
}

// ReturnLines implements [inventory.OrderManager].
func (o orders) ReturnLines(ctx context.Context, ls []inventory.Line, opts ...inventory.Option) error {
	t0 := time.Now()
	err := o.om.ReturnLines(ctx, ls, opts...)
	if err != nil {
		o.record(ctx, "return_lines", t0, err, o.lines(ls, opts))
	}
	return err
}

// Reserve implements [inventory.OrderManager].
func (o orders) Reserve(ctx context.Context, id string, ls []inventory.Line, ttl time.Duration) error {
	t0 := time.Now()
	err := o.om.Reserve(ctx, id, ls, ttl)
	if err != nil {
		o.record(ctx, "reserve", t0, err, func() []slog.Attr {
			return append(o.lines(ls, nil)(), slog.String("hold", id), slog.Duration("ttl", ttl))
		})
	}
	return err
}

// Confirm implements [inventory.OrderManager].
func (o orders) Confirm(ctx context.Context, id string) error {
	t0 := time.Now()
	err := o.om.Confirm(ctx, id)
	if err != nil {
		o.record(ctx, "confirm", t0, err, attrs(slog.String("hold", id)))
	}
	return err
}

// Cancel implements [inventory.OrderManager].
func (o orders) Cancel(ctx context.Context, id string) error {
	t0 := time.Now()
	err := o.om.Cancel(ctx, id)
	if err != nil {
		o.record(ctx, "cancel", t0, err, attrs(slog.String("hold", id)))
	}
	return err
}

// Held implements [inventory.OrderManager].
func (o orders) Held(ctx context.Context, sku string) (int64, error) {
	t0 := time.Now()
	n, err := o.om.Held(ctx, sku)
	if err != nil {
		o.record(ctx, "held", t0, err, attrs(slog.String("sku", sku)))
	}
	return n, err
}

// Sweep implements [inventory.OrderManager].
func (o orders) Sweep(ctx context.Context) (int, error) {
	t0 := time.Now()
	n, err := o.om.Sweep(ctx)
	if err != nil {
		o.record(ctx, "sweep", t0, err, attrs(slog.Int("released", n)))
	}
	return n, err
}

var (
	_ inventory.StockManager = (*logger)(nil)
	_ inventory.OrderManager = orders{}
)
