// Package retry repeats a stock call that ended without a verdict: with the
// same idempotency key every time, jittered exponential pauses between the
// attempts (github.com/cenkalti/backoff/v5), at most a bounded number of
// attempts and never past ctx.
//
//	rem, err := retry.Do(ctx, buyer, func(ctx context.Context, opts ...inventory.Option) (int64, error) {
//		return m.Reduce(ctx, sku, 1, opts...) // opts is inventory.WithKey(buyer)
//	})
//
// A verdict is an answer that another attempt would not change, and is
// never retried: [inventory.ErrInsufficientStock], [inventory.ErrNotFound],
// [inventory.ErrInvalidArgument], [inventory.ErrDuplicate],
// [inventory.ErrHoldReleased], [inventory.ErrHoldConfirmed]. What is
// retried:
//
//   - [inventory.ErrContention]: the strategy gave up and nothing changed;
//     retried with or without a key.
//   - any other error (a timeout, a broken connection, a failed server):
//     the call may have taken effect, so it is retried only with a key,
//     whose repeat takes effect at most once. A repeat of a call that took
//     effect answers ErrDuplicate with the first call's remaining value:
//     Do returns it, so after a retry ErrDuplicate means "done, once".
//
// Reserve, Confirm and Cancel take no options: their hold id is their key.
// Pass it as key, and ignore opts in the call.
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/stockkit/inventory"
)

// Defaults of the options.
const (
	DefaultAttempts = 5
	DefaultInitial  = 10 * time.Millisecond
	DefaultMax      = time.Second
)

// Option configures Do and Run.
type Option func(*config)

type config struct {
	attempts     int
	initial, max time.Duration
}

// WithAttempts sets how many times the call is made at most, the first
// included; at least 1. The default is [DefaultAttempts].
func WithAttempts(n int) Option { return func(c *config) { c.attempts = n } }

// WithBackoff sets the pause before the first retry (each next one is
// twice the last, up to max), each drawn at random within ±50%. initial
// must be positive and max at least initial. The defaults are
// [DefaultInitial] and [DefaultMax].
func WithBackoff(initial, max time.Duration) Option {
	return func(c *config) { c.initial, c.max = initial, max }
}

// Do makes call, with inventory.WithKey(key) as its options when key is
// not empty (none when it is), and makes it again while it ends without a
// verdict and may be retried (see the package documentation), after a
// pause, until it has been made the WithAttempts number of times or ctx
// is done. It returns the last call's value and error; when ctx ended the
// retries, the error joins the last call's with ctx's. Options out of
// range make Do return an error wrapping inventory.ErrInvalidArgument
// without calling.
func Do[T any](ctx context.Context, key string, call func(ctx context.Context, opts ...inventory.Option) (T, error), opts ...Option) (T, error) {
	var zero T
	c := config{attempts: DefaultAttempts, initial: DefaultInitial, max: DefaultMax}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := c.check(); err != nil {
		return zero, err
	}
	var callOpts []inventory.Option
	if key != "" {
		callOpts = []inventory.Option{inventory.WithKey(key)}
	}
	var last error
	v, err := backoff.Retry(ctx, func() (T, error) {
		v, err := call(ctx, callOpts...)
		last = err
		if err != nil && (!Retryable(err, key != "") || ctx.Err() != nil) {
			return v, backoff.Permanent(err)
		}
		return v, err
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{
		InitialInterval:     c.initial,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         c.max,
	}), backoff.WithMaxTries(uint(c.attempts)), backoff.WithMaxElapsedTime(0))
	return v, outcome(ctx, err, last, key != "")
}

// outcome is Do's error from backoff's err and the last call's: the call's
// own error, joined with ctx's when ctx ended the retries.
func outcome(ctx context.Context, err, last error, keyed bool) error {
	if p, ok := errors.AsType[*backoff.PermanentError](err); ok {
		err = p.Err // the last attempt's own error, a verdict
	}
	switch {
	case err != nil && last != nil && err != last:
		return errors.Join(last, err) // ctx ended during a pause
	case err != nil && ctx.Err() != nil && Retryable(err, keyed) && !errors.Is(err, ctx.Err()):
		return errors.Join(err, ctx.Err()) // ctx ended during the call, which would have been retried
	}
	return err
}

// Run is Do for a call that answers only an error (ReduceLines,
// ReturnLines, Reserve, Confirm, Cancel).
func Run(ctx context.Context, key string, call func(ctx context.Context, opts ...inventory.Option) error, opts ...Option) error {
	_, err := Do(ctx, key, func(ctx context.Context, o ...inventory.Option) (struct{}, error) {
		return struct{}{}, call(ctx, o...)
	}, opts...)
	return err
}

// Retryable reports whether a call that returned err may be made again:
// not after a verdict; after ErrContention always; after any other error
// only when keyed (the call carries an idempotency key).
func Retryable(err error, keyed bool) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, inventory.ErrInsufficientStock), errors.Is(err, inventory.ErrNotFound),
		errors.Is(err, inventory.ErrInvalidArgument), errors.Is(err, inventory.ErrDuplicate),
		errors.Is(err, inventory.ErrHoldReleased), errors.Is(err, inventory.ErrHoldConfirmed):
		return false
	case errors.Is(err, inventory.ErrContention):
		return true
	}
	return keyed
}

func (c config) check() error {
	switch {
	case c.attempts < 1:
		return fmt.Errorf("%w: retry: WithAttempts(%d): want at least 1", inventory.ErrInvalidArgument, c.attempts)
	case c.initial <= 0 || c.max < c.initial:
		return fmt.Errorf("%w: retry: WithBackoff(%v, %v): want 0 < initial <= max", inventory.ErrInvalidArgument, c.initial, c.max)
	}
	return nil
}
