// Package front is the shared front of every strategy's StockManager: it
// validates the arguments, checks the context before any I/O, calls the
// strategy's [Backend] and wraps its errors uniformly with the strategy's
// name, as in `luascript: reduce "sku": ...`. Sentinels stay reachable with
// errors.Is.
package front

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/refusals"
)

// Backend is what a strategy implements behind the front. Its arguments are
// already valid and ctx was live when it was called.
type Backend interface {
	// Init sets the stock of sku to qty, creating the SKU if absent.
	Init(ctx context.Context, sku string, qty int64) error
	// Get returns the stock of sku.
	Get(ctx context.Context, sku string) (int64, error)
	// Move reduces or returns qty units of sku, with idempotency key key
	// when key != "", and returns the remaining stock.
	Move(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error)
}

// Front implements inventory.StockManager over a Backend. The zero Front is
// not usable; make one with [New].
type Front struct {
	name string
	b    Backend
	r    *refusals.Table // nil: no local refusals
}

// New returns the front of the strategy called name over b.
func New(name string, b Backend) Front { return Front{name: name, b: b} }

// WithRefusals returns f refusing locally, with r, the unkeyed Reduces that
// cannot fit the stock of a refusal the backend gave less than r's TTL ago
// (see package refusals); nil turns them off. The backend's Move must
// return the stock it saw with [inventory.ErrInsufficientStock], as the
// contract says. Keyed calls always reach the backend (one may repeat a
// call that took effect); Init and Return drop what is known of their SKU
// before they are sent and after they return.
func (f Front) WithRefusals(r *refusals.Table) Front {
	f.r = r
	return f
}

// ErrRefusedHere is the error of a local refusal (see [Front.WithRefusals]);
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
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return f.wrapBad("init", err)
	}
	if err := ctx.Err(); err != nil {
		return f.wrap("init", sku, err)
	}
	if f.r != nil {
		f.r.Added(sku)
		defer f.r.Added(sku)
	}
	if err := f.b.Init(ctx, sku, qty); err != nil {
		return f.wrap("init", sku, err)
	}
	return nil
}

// Get implements [inventory.StockManager].
func (f Front) Get(ctx context.Context, sku string) (int64, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, f.wrapBad("get", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap("get", sku, err)
	}
	n, err := f.b.Get(ctx, sku)
	if err != nil {
		return n, f.wrap("get", sku, err)
	}
	return n, nil
}

// Reduce implements [inventory.StockManager].
func (f Front) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.move(ctx, sku, qty, inventory.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (f Front) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.move(ctx, sku, qty, inventory.DirReturn, opts)
}

// move is Reduce or Return, as dir says.
func (f Front) move(ctx context.Context, sku string, qty int64, dir inventory.Direction, opts []inventory.Option) (int64, error) {
	o, err := inventory.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, f.wrapBad(string(dir), err)
	}
	if err := ctx.Err(); err != nil {
		return 0, f.wrap(string(dir), sku, err)
	}
	var n int64
	switch {
	case f.r == nil:
		n, err = f.b.Move(ctx, sku, qty, dir, o.Key)
	case dir == inventory.DirReturn:
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
	if err != nil {
		return n, f.wrap(string(dir), sku, err)
	}
	return n, nil
}

// wrapBad wraps a validation error, which names the bad argument itself.
func (f Front) wrapBad(op string, err error) error {
	return fmt.Errorf("%s: %s: %w", f.name, op, err)
}

// wrap prefixes err with the strategy's name, the operation and the SKU,
// unless err already carries the strategy's name (a backend that shares
// error helpers with other code may name itself).
func (f Front) wrap(op, sku string, err error) error {
	if strings.HasPrefix(err.Error(), f.name+": ") {
		return err
	}
	return fmt.Errorf("%s: %s %q: %w", f.name, op, sku, err)
}
