// Package inventory deducts stock without ever overselling.
//
// A service depends on the [StockManager] interface and picks a strategy with
// one constructor call; swapping strategy changes that one line. Every
// strategy in this module (luascript, optimistic, rowlock, redislock,
// redlock, zklock, sqllock and tiered) passes the same public conformance
// suite, [github.com/stockkit/inventory/inventorytest].
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
// # Orders
//
// A shop sells orders, not counters: several SKUs at once, held while the
// buyer pays, released when the payment never comes, and written in the
// same transaction as the order row. [OrderManager] is that contract.
// Every strategy of this module implements it beside [StockManager]; test
// for it with a type assertion, as for any optional interface:
//
//	om, ok := m.(inventory.OrderManager)
//
// The stock of a SKU is then split three ways: available (what Get
// returns, what Reduce takes from), held (in live or not yet released
// holds, see [OrderManager.Held]) and gone (sold). For every SKU, at every
// moment:
//
//	initial - available == sold - returned + held
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
	"strings"
	"time"

	"github.com/stockkit/inventory/internal/callopt"
	"github.com/stockkit/inventory/internal/poll"
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
// a timeout, ctx.Err() or the broken connection's own error (io.EOF, a
// reset), and a retry with the same idempotency key is safe.
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

// Option configures one call of Reduce, Return, ReduceLines or
// ReturnLines; [WithKey] and [WithRef] make one. Pass options after the
// call's arguments, as in m.Reduce(ctx, sku, 1, inventory.WithKey(buyerID)).
// A nil Option is ignored; of two options that set the same thing, the last
// wins.
type Option interface {
	option() // only this package makes Options
}

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
	return optionFunc(func(o *callopt.Options) { callopt.SetKey(o, key) })
}

// optionFunc is an Option that sets what it configures by calling itself.
// Strategies read it through
// [github.com/stockkit/inventory/driver.Apply].
type optionFunc func(*callopt.Options)

func (optionFunc) option() {}

// Set implements callopt.Setter.
func (f optionFunc) Set(o *callopt.Options) { f(o) }

// MaxLines is the most lines one multi-SKU call takes.
const MaxLines = 100

// MinHoldTTL and MaxHoldTTL bound the TTL of a hold ([OrderManager.Reserve]).
const (
	MinHoldTTL = time.Millisecond
	MaxHoldTTL = 30 * 24 * time.Hour
)

// Line is one SKU and quantity of a multi-SKU call. Qty is in 1..MaxStock.
type Line struct {
	SKU string
	Qty int64
}

// More sentinel errors, of the order calls.
var (
	// ErrHoldReleased reports that Confirm found its hold expired or
	// cancelled: its units are back in the available stock and nothing
	// changed.
	ErrHoldReleased = errors.New("inventory: hold expired or cancelled")

	// ErrHoldConfirmed reports that Cancel found its hold confirmed: the
	// units are sold, and giving them back is a Return (a refund). Nothing
	// changed.
	ErrHoldConfirmed = errors.New("inventory: hold already confirmed")

	// ErrHoldNotFound reports that Confirm or Cancel found no hold with
	// its id: never reserved, or ended more than the key TTL ago. It
	// wraps [ErrNotFound], so errors.Is(err, ErrNotFound) holds too.
	ErrHoldNotFound error = &notFound{"inventory: hold not found"}
)

// notFound is a sentinel of its own that wraps ErrNotFound.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }
func (e *notFound) Unwrap() error { return ErrNotFound }

// Shortfall is one line of a multi-SKU call that did not fit, with the
// available stock the strategy saw for its SKU.
type Shortfall struct {
	Line
	Available int64
}

// InsufficientError is the error of ReduceLines and Reserve when some line
// did not fit. It wraps [ErrInsufficientStock]; reach it with [errors.As].
// Nothing changed on any SKU of the call.
type InsufficientError struct {
	// Short lists the lines that did not fit, at least one, in the order
	// of the call's lines. A strategy that checks the lines one by one
	// (the lock strategies, a Redis Cluster across slots) lists the first
	// line it found short; one that checks them together lists them all.
	Short []Shortfall
}

// Error implements error.
func (e *InsufficientError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInsufficientStock.Error())
	for i, s := range e.Short {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q has %d, asked %d", s.SKU, s.Available, s.Qty)
	}
	return b.String()
}

// Unwrap returns ErrInsufficientStock.
func (e *InsufficientError) Unwrap() error { return ErrInsufficientStock }

// OrderManager moves several SKUs at once and holds stock for orders. Its
// methods follow StockManager's rules: arguments are checked before any
// I/O (an error wrapping ErrInvalidArgument, nothing changed), ctx is
// honoured within DeadlineSlack, backend errors are wrapped, and a call
// that returns an error did not take effect (ErrDuplicate says an earlier
// call did), or, where the outcome cannot be known, its retry (with the
// same key or hold id) is safe.
//
// Lines: a call takes 1..[MaxLines] lines, each with a valid SKU listed
// once and a qty in 1..MaxStock.
//
// Atomicity: every line or none. SQL and a single Redis (or lines in one
// Redis Cluster slot) move all lines in one atomic step. Where lines span
// shards or per-SKU locks, the strategy holds the lines one by one and
// gives back what it took when a line is refused; a crash midway leaves
// only holds, which expire: never an oversell, never a lost unit, and the
// final effect is all lines or none.
//
// Clocks: a hold's TTL runs on the backend's clock (Redis TIME, the
// database's clock), never the client's.
type OrderManager interface {
	// ReduceLines takes every line or none.
	//
	// With WithKey(k), the call takes effect at most once per (k,
	// direction) among multi-line calls (apart from the keys of
	// single-SKU Reduce calls): a repeat changes nothing and returns
	// ErrDuplicate.
	//
	// Errors:
	//   - *InsufficientError (wraps ErrInsufficientStock): some line did
	//     not fit; nothing changed on any SKU.
	//   - ErrNotFound: some SKU was never initialised; nothing changed.
	//   - ErrInvalidArgument: bad lines or option; checked before any I/O.
	//   - ErrContention: the strategy gave up; nothing changed.
	//   - ErrDuplicate: see above.
	//   - backend errors and ctx.Err(), wrapped; nothing changed.
	ReduceLines(ctx context.Context, lines []Line, opts ...Option) error

	// ReturnLines gives every line back, or none: as ReduceLines, with
	// ErrInvalidArgument (not ErrInsufficientStock) when a line would
	// raise its stock past MaxStock.
	ReturnLines(ctx context.Context, lines []Line, opts ...Option) error

	// Reserve takes every line (or none) out of the available stock at
	// once and holds the units under id until Confirm(id) sells them,
	// Cancel(id) gives them back, or ttl passes on the backend's clock,
	// which gives them back with no caller action. id follows the SKU
	// rules; ttl is in MinHoldTTL..MaxHoldTTL.
	//
	// Errors: as ReduceLines, and ErrDuplicate when id is held or was
	// used by a hold that ended less than the strategy's key TTL ago
	// (DefaultKeyTTL unless configured); nothing changed. A Reserve that
	// failed does not use up its id.
	Reserve(ctx context.Context, id string, lines []Line, ttl time.Duration) error

	// Confirm sells the units held under id for good. Of a Confirm and
	// the hold's expiry, exactly one wins.
	//
	// Errors:
	//   - ErrDuplicate: the hold is already confirmed; nothing changed.
	//   - ErrHoldReleased: the hold expired or was cancelled; its units
	//     are back; nothing changed.
	//   - ErrHoldNotFound (wraps ErrNotFound): no hold has id (or it
	//     ended more than the key TTL ago).
	//   - ErrInvalidArgument, ErrContention, backend errors: as above.
	Confirm(ctx context.Context, id string) error

	// Cancel gives the units held under id back. It is idempotent: Cancel
	// of a cancelled or expired hold returns nil and changes nothing.
	//
	// Errors:
	//   - ErrHoldConfirmed: the hold is confirmed (a refund is a Return);
	//     nothing changed.
	//   - ErrHoldNotFound (wraps ErrNotFound): no hold has id (or it
	//     ended more than the key TTL ago).
	//   - ErrInvalidArgument, ErrContention, backend errors: as above.
	Cancel(ctx context.Context, id string) error

	// Held returns the units of sku in holds not yet released. A hold
	// past its TTL counts until it is released, so that available + held
	// stays exact: expired holds of a SKU are released inside the atomic
	// step of any later call that moves the SKU (Reduce, Return, the
	// lines calls, Reserve), and by Sweep.
	//
	// Errors: ErrNotFound; ErrInvalidArgument; backend errors, wrapped.
	Held(ctx context.Context, sku string) (int64, error)

	// Sweep releases every hold whose TTL has passed, on every SKU, and
	// returns how many holds it released. It is safe to run from many
	// processes at once: each hold is released once. See [Reap] for a
	// background loop.
	Sweep(ctx context.Context) (released int, err error)
}

// Sweeper is the part of [OrderManager] that [Reap] needs.
type Sweeper interface {
	Sweep(ctx context.Context) (released int, err error)
}

// Reap calls s.Sweep every period until ctx is done, and then returns
// ctx's error. A hold is therefore released at most one period (plus one
// Sweep's duration) after its TTL passes, even when nobody touches its SKU
// again. Run it in a goroutine of your own; cancelling ctx stops it and
// leaves no goroutine behind. onErr, if not nil, receives each failed
// Sweep's error (the loop carries on); Sweep runs with ctx.
func Reap(ctx context.Context, s Sweeper, period time.Duration, onErr func(error)) error {
	if period <= 0 {
		return fmt.Errorf("%w: reap period %v is not positive", ErrInvalidArgument, period)
	}
	sweep := func(ctx context.Context) error {
		_, err := s.Sweep(ctx)
		return err
	}
	return poll.Every(ctx, period, false, sweep, onErr)
}
