// Package front is the face every strategy shows its callers: it
// validates the arguments, checks the context before any I/O, applies the
// local refusals, calls the strategy's backend and wraps its errors
// uniformly, as in `luascript: reduce "sku": ...`. Sentinels stay reachable
// with errors.Is.
//
// A strategy embeds one face, a [Front] over its [Backend], in its Manager,
// so that the Manager's methods (the four of [inventory.StockManager] and
// the seven of [inventory.OrderManager]) are the face's and none is written
// out per strategy. Embed it under an unexported alias (type face =
// front.Front), so that the field stays unexported. The backend is called
// only with valid arguments and a live ctx.
//
// An error the face returns is an [*Error]: `strategy: op "subject":
// cause`. A backend that has to name a call other than the face's (a lock
// that timed out) returns an *Error of its own strategy, which the face
// passes on as it is; errors are never matched by their text.
package front

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/refusals"
)

// Backend is what a strategy implements behind its [Front]: the calls of
// [inventory.StockManager] and [inventory.OrderManager], with valid
// arguments (SKUs and quantities checked, lines checked by
// driver.ValidateLines, ids by driver.ValidateHoldID, a ttl in range) and
// a ctx that was live when it was called. Its errors need not name the
// strategy: the face wraps them in an [*Error], unless they are one of the
// strategy's own already.
type Backend interface {
	// Init sets the stock of sku to qty, creating the SKU if absent.
	Init(ctx context.Context, sku string, qty int64) error
	// Get returns the stock of sku.
	Get(ctx context.Context, sku string) (int64, error)
	// Move reduces or returns qty units of sku, with idempotency key key
	// when key != "", and returns the remaining stock.
	Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error)

	// MoveLines is ReduceLines (dir DirReduce) or ReturnLines, with
	// idempotency key key when key != "".
	MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error
	Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error
	Confirm(ctx context.Context, id string) error
	Cancel(ctx context.Context, id string) error
	Held(ctx context.Context, sku string) (int64, error)
	Sweep(ctx context.Context) (int, error)
}

// Error is the error of a call through a face: the strategy's name, the
// operation, what it was about (a SKU or hold id, or nothing) and the
// cause, which it wraps. A backend that returns an *Error of its own
// strategy is not wrapped again.
type Error struct {
	Strategy string // "luascript"
	Op       string // "reduce", "reserve", "reduce lines"...; "" when the cause says it
	Subject  string // the SKU or hold id; "" when the call has none, or its arguments were bad
	Err      error
}

// Error implements error: `strategy: op "subject": cause`, or
// `strategy: op: cause` without a subject, or `strategy: cause` without an
// op.
func (e *Error) Error() string {
	if e.Op == "" {
		return e.Strategy + ": " + e.Err.Error()
	}
	if e.Subject == "" {
		return e.Strategy + ": " + e.Op + ": " + e.Err.Error()
	}
	return e.Strategy + ": " + e.Op + " " + strconv.Quote(e.Subject) + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Front implements inventory.StockManager and inventory.OrderManager over
// a Backend: a strategy embeds it in its Manager, whose methods are then
// the Front's. It has no exported method beyond those of the two
// interfaces. The zero Front is not usable; make one with [New].
type Front struct {
	name string
	b    Backend
	r    *refusals.Table // nil: no local refusals
}

// New returns the face of the strategy called name over b.
//
// With r not nil, the face refuses locally, with r, the unkeyed Reduces
// that cannot fit the stock of a refusal the backend gave less than r's TTL
// ago (see package refusals). The backend's Move must then return the
// stock it saw with [inventory.ErrInsufficientStock], as the contract says.
// Keyed calls always reach the backend (one may repeat a call that took
// effect); Init and Return drop what is known of their SKU before they are
// sent and after they return.
func New(name string, b Backend, r *refusals.Table) Front {
	return Front{name: name, b: b, r: r}
}

// ErrRefusedHere is the error of a local refusal (see [New]);
// its remaining value is the stock seen. It is built once: a sold-out SKU's
// refusals are the hot path.
var ErrRefusedHere = fmt.Errorf("%w: the stock seen less than the WithRefusals TTL ago is below the quantity (refused in the process)",
	inventory.ErrInsufficientStock)

// CheckRefusals returns the error of pkg's WithRefusals(ttl) when ttl is
// out of its range, 1ms..[refusals.MaxTTL].
func CheckRefusals(pkg string, ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > refusals.MaxTTL {
		return fmt.Errorf("%w: %s: WithRefusals(%v): want 1ms..%v", inventory.ErrInvalidArgument, pkg, ttl, refusals.MaxTTL)
	}
	return nil
}

// Init implements [inventory.StockManager].
func (f Front) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
		return f.wrap("init", "", err)
	}
	if err := ctx.Err(); err != nil {
		return f.wrap("init", sku, err)
	}
	if f.r != nil {
		f.r.Added(sku)
		defer f.r.Added(sku)
	}
	return f.wrap("init", sku, f.b.Init(ctx, sku, qty))
}

// Get implements [inventory.StockManager].
func (f Front) Get(ctx context.Context, sku string) (int64, error) {
	return f.read(ctx, "get", sku, f.b.Get)
}

// read is the read op of sku (Get or Held), by fn.
func (f Front) read(ctx context.Context, op, sku string, fn func(context.Context, string) (int64, error)) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, f.wrap(op, "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap(op, sku, err)
	}
	n, err := fn(ctx, sku)
	return n, f.wrap(op, sku, err)
}

// Reduce implements [inventory.StockManager].
func (f Front) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.move(ctx, sku, qty, driver.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (f Front) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.move(ctx, sku, qty, driver.DirReturn, opts)
}

// move is Reduce or Return, as dir says.
func (f Front) move(ctx context.Context, sku string, qty int64, dir driver.Direction, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, f.wrap(string(dir), "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap(string(dir), sku, err)
	}
	ctx = driver.WithRef(ctx, o.Ref) // for a ledger: the backend reads it with driver.Ref
	var n int64
	switch {
	case f.r == nil:
		n, err = f.b.Move(ctx, sku, qty, dir, o.Key)
	case dir == driver.DirReturn:
		f.r.Added(sku)
		n, err = f.b.Move(ctx, sku, qty, dir, o.Key)
		f.r.Added(sku)
	case o.Key != "": // may repeat a call that took effect: the backend knows
		n, err = f.b.Move(ctx, sku, qty, dir, o.Key)
	default:
		if stock, ok := f.r.Check(sku, qty); ok {
			return stock, f.wrap(string(dir), sku, ErrRefusedHere)
		}
		sent, epoch := time.Now(), f.r.Epoch(sku)
		n, err = f.b.Move(ctx, sku, qty, dir, o.Key)
		if errors.Is(err, inventory.ErrInsufficientStock) {
			f.r.Refused(sku, n, sent, epoch)
		}
	}
	return n, f.wrap(string(dir), sku, err)
}

// wrap wraps err, if any, as the error of op on subject: an [*Error],
// unless err is one of this strategy's already (a backend that shares
// its error helpers with other code may name itself).
func (f Front) wrap(op, subject string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok && e.Strategy == f.name {
		return err
	}
	return &Error{Strategy: f.name, Op: op, Subject: subject, Err: err}
}

// ReduceLines implements [inventory.OrderManager].
func (f Front) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return f.moveLines(ctx, "reduce lines", lines, driver.DirReduce, opts)
}

// ReturnLines implements [inventory.OrderManager].
func (f Front) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return f.moveLines(ctx, "return lines", lines, driver.DirReturn, opts)
}

func (f Front) moveLines(ctx context.Context, op string, lines []inventory.Line, dir driver.Direction, opts []inventory.Option) error {
	o, err := driver.ValidateLinesCall(lines, opts)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = f.b.MoveLines(driver.WithRef(ctx, o.Ref), lines, dir, o.Key)
	}
	return f.wrap(op, "", err)
}

// Reserve implements [inventory.OrderManager].
func (f Front) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if err := driver.ValidateReserve(id, lines, ttl); err != nil {
		return f.wrap("reserve", "", err)
	}
	return f.onHold(ctx, "reserve", id, func() error { return f.b.Reserve(ctx, id, lines, ttl) })
}

// Confirm implements [inventory.OrderManager].
func (f Front) Confirm(ctx context.Context, id string) error {
	if err := driver.ValidateHoldID(id); err != nil {
		return f.wrap("confirm", "", err)
	}
	return f.onHold(ctx, "confirm", id, func() error { return f.b.Confirm(ctx, id) })
}

// Cancel implements [inventory.OrderManager].
func (f Front) Cancel(ctx context.Context, id string) error {
	if err := driver.ValidateHoldID(id); err != nil {
		return f.wrap("cancel", "", err)
	}
	return f.onHold(ctx, "cancel", id, func() error { return f.b.Cancel(ctx, id) })
}

// onHold runs fn, the call op on hold id, once ctx is checked.
func (f Front) onHold(ctx context.Context, op, id string, fn func() error) error {
	err := ctx.Err()
	if err == nil {
		err = fn()
	}
	return f.wrap(op, id, err)
}

// Held implements [inventory.OrderManager].
func (f Front) Held(ctx context.Context, sku string) (int64, error) {
	return f.read(ctx, "held", sku, f.b.Held)
}

// Sweep implements [inventory.OrderManager].
func (f Front) Sweep(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, f.wrap("sweep", "", err)
	}
	n, err := f.b.Sweep(ctx)
	return n, f.wrap("sweep", "", err)
}

var (
	_ inventory.StockManager = Front{}
	_ inventory.OrderManager = Front{}
)
