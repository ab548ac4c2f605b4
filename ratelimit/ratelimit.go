// Package ratelimit puts token buckets (golang.org/x/time/rate) in front of
// any [inventory.StockManager]: one for all calls and one per SKU, so that a
// flash sale's burst is refused at the door instead of queueing on the
// backend's locks.
//
//	m, err := ratelimit.Wrap(inner, ratelimit.WithGlobal(5000, 500), ratelimit.WithPerSKU(1000, 100))
//
// A refused call does no I/O and changes nothing: its error wraps both
// [ErrLimited] (whose message says "rate limited") and
// [inventory.ErrContention], so a caller that already retries contention
// later (an HTTP 503 with Retry-After) handles it with no new code.
//
// What is limited: the calls that move stock, Reduce, Return, ReduceLines,
// ReturnLines and Reserve, take one token from the global bucket and one
// from the bucket of each SKU they name; Confirm and Cancel, which name a
// hold rather than a SKU, take one from the global bucket. Init, Get, Held
// and Sweep are never limited: an operator can always read and restock.
// A call with bad arguments takes no token and goes to the wrapped manager,
// which refuses it with [inventory.ErrInvalidArgument]. A call takes its
// tokens from every bucket or from none.
//
// Memory stays bounded: a SKU's bucket is dropped once it has refilled to
// its burst, when it is indistinguishable from a new one, so dropping it
// changes no answer. Only the SKUs called within the last burst/rate
// seconds keep a bucket (plus those not yet visited by the pruning, which
// examines a few buckets on each call and all of them whenever their count
// doubles).
//
// The wrapper implements [inventory.OrderManager] exactly when the wrapped
// manager does.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// ErrLimited is wrapped by the error of every call a bucket refused,
// together with [inventory.ErrContention].
var ErrLimited = errors.New("ratelimit: rate limited")

// Option configures Wrap.
type Option func(*config)

type config struct {
	global, perSKU *bucketConfig
}

type bucketConfig struct {
	limit rate.Limit
	burst int
}

// WithGlobal limits all the limited calls together to limit per second,
// with bursts of up to burst calls. The default is no global limit. limit
// must be positive (rate.Inf: no limit) and burst at least 1.
func WithGlobal(limit rate.Limit, burst int) Option {
	return func(c *config) { c.global = &bucketConfig{limit, burst} }
}

// WithPerSKU limits the limited calls on each SKU to limit per second, with
// bursts of up to burst calls. The default is no per-SKU limit. limit must
// be positive (rate.Inf: no limit) and burst at least 1.
func WithPerSKU(limit rate.Limit, burst int) Option {
	return func(c *config) { c.perSKU = &bucketConfig{limit, burst} }
}

func (b *bucketConfig) check(what string) error {
	if b == nil {
		return nil
	}
	if !(b.limit > 0) || b.burst < 1 {
		return fmt.Errorf("%w: ratelimit: %s limit %v/s with burst %d: want a positive limit and a burst of at least 1",
			inventory.ErrInvalidArgument, what, float64(b.limit), b.burst)
	}
	return nil
}

// limiter is the wrapper.
type limiter struct {
	inner inventory.StockManager
	now   func() time.Time

	global *rate.Limiter // nil: no global limit

	perSKU  *bucketConfig // nil: no per-SKU limit
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	sweepAt int // sweep every bucket when there are this many
}

// minSweep is the fewest buckets a full sweep waits for; sampled is how
// many buckets each call examines.
const (
	minSweep = 1024
	sampled  = 4
)

// Wrap returns m behind the configured token buckets. With no option it
// limits nothing. The result implements [inventory.OrderManager] when m
// does. An out-of-range option makes Wrap return an error wrapping
// [inventory.ErrInvalidArgument].
func Wrap(m inventory.StockManager, opts ...Option) (inventory.StockManager, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: ratelimit: nil manager", inventory.ErrInvalidArgument)
	}
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := errors.Join(c.global.check("global"), c.perSKU.check("per-SKU")); err != nil {
		return nil, err
	}
	l := &limiter{inner: m, now: time.Now, perSKU: c.perSKU, buckets: map[string]*rate.Limiter{}, sweepAt: minSweep}
	if c.global != nil {
		l.global = rate.NewLimiter(c.global.limit, c.global.burst)
	}
	if om, ok := m.(inventory.OrderManager); ok {
		return orders{l, om}, nil
	}
	return l, nil
}

// refused is the error of a call that a bucket refused.
func refused(op, what string) error {
	return fmt.Errorf("%w: %s refused by the %s limit: %w", ErrLimited, op, what, inventory.ErrContention)
}

// takeSKU takes a token from sku's bucket, created if absent, and returns
// the reservation to cancel if another bucket refuses the call.
func (l *limiter) takeSKU(sku string, now time.Time) (*rate.Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(now)
	b := l.buckets[sku]
	if b == nil {
		b = rate.NewLimiter(l.perSKU.limit, l.perSKU.burst)
		l.buckets[sku] = b
	}
	r := b.ReserveN(now, 1)
	if r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return nil, false
	}
	return r, true
}

// pruneLocked drops full buckets: a few on every call, all of them
// whenever their count has doubled since the last full sweep.
func (l *limiter) pruneLocked(now time.Time) {
	if len(l.buckets) >= l.sweepAt {
		for k, b := range l.buckets {
			if b.TokensAt(now) >= float64(l.perSKU.burst) {
				delete(l.buckets, k)
			}
		}
		l.sweepAt = max(2*len(l.buckets), minSweep)
		return
	}
	n := 0
	for k, b := range l.buckets { // from a random place
		if b.TokensAt(now) >= float64(l.perSKU.burst) {
			delete(l.buckets, k)
		}
		if n++; n == sampled {
			break
		}
	}
}

// admit takes a token from the global bucket and from each of skus'
// buckets, or none, and returns the refusal if some bucket has none. id,
// if not empty, is the hold the call names.
func (l *limiter) admit(op, id string, skus ...string) error {
	if l.global == nil && l.perSKU == nil {
		return nil
	}
	now := l.now()
	var taken []*rate.Reservation
	var one [1]*rate.Reservation
	if len(skus) == 1 {
		taken = one[:0]
	}
	cancel := func() {
		for _, r := range taken {
			r.CancelAt(now)
		}
	}
	if l.perSKU != nil {
		for _, sku := range skus {
			r, ok := l.takeSKU(sku, now)
			if !ok {
				cancel()
				return refused(fmt.Sprintf("%s %q", op, sku), "per-SKU")
			}
			taken = append(taken, r)
		}
	}
	if l.global != nil && !l.global.AllowN(now, 1) {
		cancel()
		if id != "" {
			op = fmt.Sprintf("%s %q", op, id)
		}
		return refused(op, "global")
	}
	return nil
}

// Unwrap returns the wrapped manager.
func (l *limiter) Unwrap() inventory.StockManager { return l.inner }

// Init implements [inventory.StockManager]; it is never limited.
func (l *limiter) Init(ctx context.Context, sku string, qty int64) error {
	return l.inner.Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager]; it is never limited.
func (l *limiter) Get(ctx context.Context, sku string) (int64, error) {
	return l.inner.Get(ctx, sku)
}

// Reduce implements [inventory.StockManager].
func (l *limiter) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if _, err := driver.ValidateMove(sku, qty, opts); err == nil {
		if err := l.admit("reduce", "", sku); err != nil {
			return 0, err
		}
	}
	return l.inner.Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (l *limiter) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if _, err := driver.ValidateMove(sku, qty, opts); err == nil {
		if err := l.admit("return", "", sku); err != nil {
			return 0, err
		}
	}
	return l.inner.Return(ctx, sku, qty, opts...)
}

// orders is the wrapper of a manager that has the order calls.
type orders struct {
	*limiter
	om inventory.OrderManager
}

func skus(lines []inventory.Line) []string {
	s := make([]string, len(lines))
	for i, l := range lines {
		s[i] = l.SKU
	}
	return s
}

// ReduceLines implements [inventory.OrderManager].
func (o orders) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	if _, err := driver.ValidateLinesCall(lines, opts); err == nil {
		if err := o.admit("reduce lines", "", skus(lines)...); err != nil {
			return err
		}
	}
	return o.om.ReduceLines(ctx, lines, opts...)
}

// ReturnLines implements [inventory.OrderManager].
func (o orders) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	if _, err := driver.ValidateLinesCall(lines, opts); err == nil {
		if err := o.admit("return lines", "", skus(lines)...); err != nil {
			return err
		}
	}
	return o.om.ReturnLines(ctx, lines, opts...)
}

// Reserve implements [inventory.OrderManager].
func (o orders) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if err := driver.ValidateReserve(id, lines, ttl); err == nil {
		if err := o.admit("reserve", id, skus(lines)...); err != nil {
			return err
		}
	}
	return o.om.Reserve(ctx, id, lines, ttl)
}

// Confirm implements [inventory.OrderManager]; only the global bucket
// limits it.
func (o orders) Confirm(ctx context.Context, id string) error {
	if err := driver.ValidateHoldID(id); err == nil {
		if err := o.admit("confirm", id); err != nil {
			return err
		}
	}
	return o.om.Confirm(ctx, id)
}

// Cancel implements [inventory.OrderManager]; only the global bucket
// limits it.
func (o orders) Cancel(ctx context.Context, id string) error {
	if err := driver.ValidateHoldID(id); err == nil {
		if err := o.admit("cancel", id); err != nil {
			return err
		}
	}
	return o.om.Cancel(ctx, id)
}

// Held implements [inventory.OrderManager]; it is never limited.
func (o orders) Held(ctx context.Context, sku string) (int64, error) { return o.om.Held(ctx, sku) }

// Sweep implements [inventory.OrderManager]; it is never limited.
func (o orders) Sweep(ctx context.Context) (int, error) { return o.om.Sweep(ctx) }

var (
	_ inventory.StockManager = (*limiter)(nil)
	_ inventory.OrderManager = orders{}
)
