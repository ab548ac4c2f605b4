// Package front is the shared front of every strategy's StockManager: it
// validates the arguments, checks the context before any I/O, calls the
// strategy's [Backend] and wraps its errors uniformly with the strategy's
// name, as in `luascript: reduce "sku": ...`. Sentinels stay reachable with
// errors.Is.
package front

import (
	"context"
	"fmt"
	"strings"

	"github.com/stockkit/inventory"
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
}

// New returns the front of the strategy called name over b.
func New(name string, b Backend) Front { return Front{name: name, b: b} }

// Init implements [inventory.StockManager].
func (f Front) Init(ctx context.Context, sku string, qty int64) error {
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return f.wrapBad("init", err)
	}
	if err := ctx.Err(); err != nil {
		return f.wrap("init", sku, err)
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
	n, err := f.b.Move(ctx, sku, qty, dir, o.Key)
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
