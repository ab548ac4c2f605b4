// Package front is the face every strategy shows its callers: it
// validates the arguments, checks the context before any I/O, applies the
// local refusals, calls the strategy's backend and wraps its errors
// uniformly, as in `luascript: reduce "sku": ...`. Sentinels stay reachable
// with errors.Is.
//
// A strategy embeds one face in its Manager, so that the Manager's methods
// are the face's and none is written out per strategy:
//
//   - [Stock], over a [Backend]: the four methods of
//     [inventory.StockManager].
//   - [Front], over a Backend and an [OrderBackend]: Stock's four and the
//     seven of [inventory.OrderManager].
//
// The backends are called only with valid arguments and a live ctx.
package front

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/refusals"
)

// Backend is what a strategy implements behind [Stock]. Its arguments are
// already valid and ctx was live when it was called.
type Backend interface {
	// Init sets the stock of sku to qty, creating the SKU if absent.
	Init(ctx context.Context, sku string, qty int64) error
	// Get returns the stock of sku.
	Get(ctx context.Context, sku string) (int64, error)
	// Move reduces or returns qty units of sku, with idempotency key key
	// when key != "", and returns the remaining stock.
	Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error)
}

// OrderBackend is what a strategy with orders implements behind [Front],
// beside its Backend: the calls of [inventory.OrderManager], with valid
// arguments (lines checked by driver.ValidateLines, ids by
// driver.ValidateHoldID, a ttl in range) and a live ctx.
type OrderBackend interface {
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
	Op       string // "reduce", "reserve", "reduce lines"...
	Subject  string // the SKU or hold id; "" when the call has none, or its arguments were bad
	Err      error
}

// Error implements error: `strategy: op "subject": cause`, or
// `strategy: op: cause` without a subject.
func (e *Error) Error() string {
	if e.Subject == "" {
		return e.Strategy + ": " + e.Op + ": " + e.Err.Error()
	}
	return e.Strategy + ": " + e.Op + " " + strconv.Quote(e.Subject) + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Stock implements inventory.StockManager over a Backend. The zero Stock
// is not usable; make one with [New].
type Stock struct {
	name string
	b    Backend
	r    *refusals.Table // nil: no local refusals
}

// New returns the stock face of the strategy called name over b.
func New(name string, b Backend) Stock { return Stock{name: name, b: b} }

// WithRefusals returns f refusing locally, with r, the unkeyed Reduces that
// cannot fit the stock of a refusal the backend gave less than r's TTL ago
// (see package refusals); nil turns them off. The backend's Move must
// return the stock it saw with [inventory.ErrInsufficientStock], as the
// contract says. Keyed calls always reach the backend (one may repeat a
// call that took effect); Init and Return drop what is known of their SKU
// before they are sent and after they return.
func (f Stock) WithRefusals(r *refusals.Table) Stock {
	f.r = r
	return f
}

// ErrRefusedHere is the error of a local refusal (see [Stock.WithRefusals]);
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
func (f Stock) Init(ctx context.Context, sku string, qty int64) error {
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
func (f Stock) Get(ctx context.Context, sku string) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, f.wrap("get", "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap("get", sku, err)
	}
	n, err := f.b.Get(ctx, sku)
	return n, f.wrap("get", sku, err)
}

// Reduce implements [inventory.StockManager].
func (f Stock) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.move(ctx, sku, qty, driver.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (f Stock) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.move(ctx, sku, qty, driver.DirReturn, opts)
}

// move is Reduce or Return, as dir says.
func (f Stock) move(ctx context.Context, sku string, qty int64, dir driver.Direction, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, f.wrap(string(dir), "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap(string(dir), sku, err)
	}
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
func (f Stock) wrap(op, subject string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok && e.Strategy == f.name {
		return err
	}
	if strings.HasPrefix(err.Error(), f.name+": ") {
		return err // TODO(issue 28): until every backend names itself with an *Error
	}
	return &Error{Strategy: f.name, Op: op, Subject: subject, Err: err}
}

// Front implements inventory.StockManager and inventory.OrderManager over
// a Backend and an OrderBackend. The zero Front is not usable; make one
// with [NewFront].
type Front struct {
	Stock
	o OrderBackend
}

// NewFront returns the face of the strategy called name over b and o.
func NewFront(name string, b Backend, o OrderBackend) Front {
	return Front{Stock: New(name, b), o: o}
}

// WithRefusals is [Stock.WithRefusals] for a Front.
func (f Front) WithRefusals(r *refusals.Table) Front {
	f.Stock = f.Stock.WithRefusals(r)
	return f
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
		err = f.o.MoveLines(ctx, lines, dir, o.Key)
	}
	return f.wrap(op, "", err)
}

// Reserve implements [inventory.OrderManager].
func (f Front) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if err := driver.ValidateReserve(id, lines, ttl); err != nil {
		return f.wrap("reserve", "", err)
	}
	return f.onHold(ctx, "reserve", id, func() error { return f.o.Reserve(ctx, id, lines, ttl) })
}

// Confirm implements [inventory.OrderManager].
func (f Front) Confirm(ctx context.Context, id string) error {
	if err := driver.ValidateHoldID(id); err != nil {
		return f.wrap("confirm", "", err)
	}
	return f.onHold(ctx, "confirm", id, func() error { return f.o.Confirm(ctx, id) })
}

// Cancel implements [inventory.OrderManager].
func (f Front) Cancel(ctx context.Context, id string) error {
	if err := driver.ValidateHoldID(id); err != nil {
		return f.wrap("cancel", "", err)
	}
	return f.onHold(ctx, "cancel", id, func() error { return f.o.Cancel(ctx, id) })
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
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, f.wrap("held", "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap("held", sku, err)
	}
	n, err := f.o.Held(ctx, sku)
	return n, f.wrap("held", sku, err)
}

// Sweep implements [inventory.OrderManager].
func (f Front) Sweep(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, f.wrap("sweep", "", err)
	}
	n, err := f.o.Sweep(ctx)
	return n, f.wrap("sweep", "", err)
}

var (
	_ inventory.StockManager = Stock{}
	_ inventory.OrderManager = Front{}
)
