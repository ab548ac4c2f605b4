// Package inventory deducts stock without ever overselling.
//
// A service depends on the [StockManager] interface and picks a strategy with
// one constructor call; swapping strategy changes that one line. Every
// strategy in this module (luascript, optimistic, rowlock, redislock,
// redlock, zklock) passes the same public conformance suite,
// [github.com/stockkit/inventory/inventorytest].
//
// # The contract
//
// Every method validates its arguments before any I/O: a SKU must be 1 to
// [MaxSKULen] bytes of valid UTF-8 without control characters, and a quantity
// must lie in 1..[MaxStock] for Reduce and Return, 0..MaxStock for Init.
// Invalid arguments are refused with an error wrapping [ErrInvalidArgument],
// and nothing changes.
//
// SKUs are data, never code: quotes, braces, spaces, SQL or Lua fragments and
// CJK text are plain ids. Two SKUs are the same only when their bytes are:
// no case folding, no trailing-space padding, no Unicode normalisation.
//
// Errors from the backing server (connection refused, timeouts, a cancelled
// context) are returned wrapped, never swallowed and never reported as
// [ErrInsufficientStock]. A call that returns an error did not take effect
// ([ErrDuplicate] says that an earlier call with the same key did). Where the
// client cannot know whether the server applied a call (a timeout after the
// server did its work), repeat the call with the same idempotency key
// ([WithKey]): the repeat either takes effect once or reports [ErrDuplicate].
//
// Test every error with [errors.Is]: an error may carry both a sentinel of
// this package and the backend's own cause, reachable with [errors.As].
//
// # Options
//
// Every constructor of this module (the strategies' New, the stores' New,
// the lockers' NewLocker) takes variadic functional options, WithX(...),
// under one rule: a nil option is ignored; an out-of-range value (such as
// WithMaxAttempts(0), a zero or negative timeout, an empty prefix) makes the
// constructor return an error wrapping [ErrInvalidArgument], before any
// I/O; the last of two options that set the same thing wins. Leaving an
// option out gives its default, which every option's documentation states.
package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxStock is the largest stock level and the largest quantity any call
// accepts: 2^53-1, the largest integer every backend (Lua numbers are
// doubles) holds exactly.
const MaxStock int64 = 1<<53 - 1

// MaxSKULen is the longest SKU, in bytes. Idempotency keys share the limit.
const MaxSKULen = 255

// DefaultKeyTTL is how long a strategy remembers an idempotency key unless
// it is configured otherwise.
const DefaultKeyTTL = 24 * time.Hour

// DeadlineSlack bounds how long after its ctx deadline a call of any strategy
// in this module returns, even when its server stops answering mid-call: the
// time to notice the deadline and abandon the connection. The Go scheduler's
// own delay on a loaded machine comes on top.
const DeadlineSlack = 50 * time.Millisecond

// Sentinel errors. Strategies wrap them, so compare with [errors.Is].
var (
	// ErrInsufficientStock reports that Reduce found fewer units than asked
	// for. Nothing was taken.
	ErrInsufficientStock = errors.New("inventory: insufficient stock")

	// ErrNotFound reports that the SKU was never initialised with Init.
	ErrNotFound = errors.New("inventory: sku not found")

	// ErrInvalidArgument reports a bad SKU, quantity or key, or a Return
	// that would raise the stock past MaxStock. Nothing changed.
	ErrInvalidArgument = errors.New("inventory: invalid argument")

	// ErrContention reports that the strategy gave up before taking effect:
	// a lock could not be acquired in time, or compare-and-set retries ran
	// out. Nothing changed; the caller may retry.
	ErrContention = errors.New("inventory: contention, gave up")

	// ErrDuplicate reports that a call with the same SKU, idempotency key
	// and direction already took effect. This call changed nothing; the
	// remaining value returned with it is the one the first call returned.
	ErrDuplicate = errors.New("inventory: duplicate idempotency key")
)

// StockManager keeps stock counts per SKU and never lets them go below zero.
//
// Implementations are safe for concurrent use by many goroutines and, where
// the backend is shared, by many processes. Every method honours ctx: once
// ctx is done a method returns an error wrapping ctx.Err(), and a call with a
// deadline returns within DeadlineSlack of it even while its server hangs.
// An error means the call changed nothing, except where the outcome cannot be
// known (the server applied it and the reply was lost); the error then wraps
// a timeout or ctx.Err(), and a retry with the same idempotency key is safe.
type StockManager interface {
	// Init sets the stock of sku to qty, creating the SKU if absent.
	// qty must be in 0..MaxStock. Init does not forget idempotency keys.
	//
	// Errors: ErrInvalidArgument; backend errors, wrapped.
	Init(ctx context.Context, sku string, qty int64) error

	// Reduce atomically takes qty units of sku if at least qty remain, and
	// returns what remains. qty must be in 1..MaxStock.
	//
	// Errors:
	//   - ErrInsufficientStock: fewer than qty remain; nothing was taken.
	//     The remaining stock is returned with it.
	//   - ErrNotFound: sku was never initialised.
	//   - ErrInvalidArgument: bad sku, qty or option; checked before any I/O.
	//   - ErrContention: the strategy gave up (lock or retries exhausted);
	//     nothing was taken.
	//   - ErrDuplicate: with WithKey, a Reduce with the same sku and key
	//     already took effect; remaining is what that first call returned.
	//   - backend errors and ctx.Err(), wrapped; nothing was taken.
	Reduce(ctx context.Context, sku string, qty int64, opts ...Option) (remaining int64, err error)

	// Return gives qty units of sku back and returns the new stock.
	// qty must be in 1..MaxStock, and the new stock must not pass MaxStock.
	//
	// Errors:
	//   - ErrNotFound: sku was never initialised.
	//   - ErrInvalidArgument: bad sku, qty or option, or the stock would
	//     pass MaxStock; nothing was returned.
	//   - ErrContention, ErrDuplicate, backend errors: as for Reduce.
	Return(ctx context.Context, sku string, qty int64, opts ...Option) (remaining int64, err error)

	// Get returns the current stock of sku.
	//
	// Errors: ErrNotFound; ErrInvalidArgument; backend errors, wrapped.
	Get(ctx context.Context, sku string) (int64, error)
}

// Direction says which way a call moves stock. Idempotency keys are kept
// per (SKU, key, direction), so a Reduce and a Return may share a key.
type Direction string

// The two directions.
const (
	DirReduce Direction = "reduce"
	DirReturn Direction = "return"
)

// CallOptions holds what [Option]s set on one call. Strategies obtain it
// with [Apply]; callers never need it.
type CallOptions struct {
	// Key is the idempotency key; empty means none.
	Key string

	keyed bool // WithKey was given, even with an empty key
}

// Option configures one Reduce or Return call.
type Option func(*CallOptions)

// WithKey makes the call take effect at most once per (SKU, key,
// direction): a repeat of a call that already took effect changes nothing
// and returns [ErrDuplicate] together with the first call's remaining value.
// A call that failed does not use up its key. Keys follow the SKU rules
// (1 to MaxSKULen bytes of UTF-8 without control characters) and are kept
// for a bounded time that each strategy lets you configure
// ([DefaultKeyTTL] unless configured).
//
// Using the buyer id as key gives "one per buyer" in a flash sale, and makes
// a retry after a timeout safe.
func WithKey(key string) Option {
	return func(o *CallOptions) { o.Key, o.keyed = key, true }
}

// Apply collects opts. A nil Option is ignored.
func Apply(opts []Option) CallOptions {
	var o CallOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// ValidateSKU reports whether sku is a valid SKU: 1 to MaxSKULen bytes of
// valid UTF-8 containing no control characters. The error wraps
// [ErrInvalidArgument].
func ValidateSKU(sku string) error {
	return validateID("sku", sku)
}

func validateID(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidArgument, what)
	case len(s) > MaxSKULen:
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidArgument, what, len(s), MaxSKULen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidArgument, what, s)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q has control character %U at byte %d", ErrInvalidArgument, what, s, r, i)
		}
	}
	return nil
}

// ValidateInit checks the arguments of Init: a valid SKU and qty in
// 0..MaxStock. The error wraps [ErrInvalidArgument].
func ValidateInit(sku string, qty int64) error {
	if err := ValidateSKU(sku); err != nil {
		return err
	}
	if qty < 0 || qty > MaxStock {
		return fmt.Errorf("%w: init quantity %d outside 0..%d", ErrInvalidArgument, qty, MaxStock)
	}
	return nil
}

// ValidateMove checks the arguments of Reduce and Return: a valid SKU, qty
// in 1..MaxStock and, if one was given, a valid idempotency key. It returns
// the collected options. The error wraps [ErrInvalidArgument].
func ValidateMove(sku string, qty int64, opts []Option) (CallOptions, error) {
	o := Apply(opts)
	if err := ValidateSKU(sku); err != nil {
		return o, err
	}
	if qty < 1 || qty > MaxStock {
		return o, fmt.Errorf("%w: quantity %d outside 1..%d", ErrInvalidArgument, qty, MaxStock)
	}
	if o.keyed {
		if err := validateID("idempotency key", o.Key); err != nil {
			return o, err
		}
	}
	return o, nil
}

// CheckReturn reports, as an error wrapping [ErrInvalidArgument], whether
// returning qty units to a stock of cur would pass MaxStock. Strategies call
// it once they know the current stock, before writing.
func CheckReturn(cur, qty int64) error {
	if qty > MaxStock-cur {
		return fmt.Errorf("%w: returning %d to stock %d passes MaxStock %d", ErrInvalidArgument, qty, cur, MaxStock)
	}
	return nil
}
