package sqldialect

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
)

// Tx is a SQL strategy's (optimistic's, rowlock's) calls bound to a caller's transaction:
// optimistic.Tx and rowlock.Tx are this type. Its methods are those of an
// [inventory.StockManager] (validated and wrapped by the strategy's front)
// and of an [inventory.OrderManager], each run in a savepoint of the
// transaction; Get and Held read what the transaction sees. It is for the
// goroutine that owns the transaction, and good until it ends.
type Tx struct {
	o  *Orders
	tx *sqlx.Tx
	f  front.Stock
}

// BindTx returns the calls of o bound to tx, a transaction of the caller's
// on o's database.
func BindTx(o *Orders, tx *sqlx.Tx) *Tx {
	t := &Tx{o: o, tx: tx}
	t.f = front.New(o.T.Pkg(), (*txBackend)(t))
	return t
}

// Init implements [inventory.StockManager].
func (t *Tx) Init(ctx context.Context, sku string, qty int64) error { return t.f.Init(ctx, sku, qty) }

// Get implements [inventory.StockManager]: the stock as the transaction
// sees it.
func (t *Tx) Get(ctx context.Context, sku string) (int64, error) { return t.f.Get(ctx, sku) }

// Reduce implements [inventory.StockManager].
func (t *Tx) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return t.f.Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (t *Tx) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return t.f.Return(ctx, sku, qty, opts...)
}

// ReduceLines implements [inventory.OrderManager].
func (t *Tx) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return t.o.MoveLines(ctx, t.tx, lines, driver.DirReduce, opts)
}

// ReturnLines implements [inventory.OrderManager].
func (t *Tx) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return t.o.MoveLines(ctx, t.tx, lines, driver.DirReturn, opts)
}

// Reserve implements [inventory.OrderManager].
func (t *Tx) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return t.o.Reserve(ctx, t.tx, id, lines, ttl)
}

// Confirm implements [inventory.OrderManager].
func (t *Tx) Confirm(ctx context.Context, id string) error { return t.o.Confirm(ctx, t.tx, id) }

// Cancel implements [inventory.OrderManager].
func (t *Tx) Cancel(ctx context.Context, id string) error { return t.o.Cancel(ctx, t.tx, id) }

// Held implements [inventory.OrderManager]: the held units as the
// transaction sees them.
func (t *Tx) Held(ctx context.Context, sku string) (int64, error) { return t.o.Held(ctx, t.tx, sku) }

// Sweep implements [inventory.OrderManager], every release in the
// transaction.
func (t *Tx) Sweep(ctx context.Context) (int, error) { return t.o.Sweep(ctx, t.tx) }

// txBackend is a Tx seen by its front.
type txBackend Tx

func (b *txBackend) Init(ctx context.Context, sku string, qty int64) error {
	return b.o.T.InitOn(ctx, b.tx, sku, qty)
}

func (b *txBackend) Get(ctx context.Context, sku string) (int64, error) {
	return b.o.T.GetOn(ctx, b.tx, sku)
}

func (b *txBackend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return b.o.Move(ctx, b.tx, sku, qty, dir, key)
}

// Mover is a strategy's Reduce or Return of qty units of sku, keyed when
// key is not empty, after its front validated the call.
type Mover func(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error)

// Front returns the front of t's strategy over t's own pool: Init and Get
// run on t.DB, Reduce and Return through move.
func (t *Tables) Front(move Mover) front.Stock {
	return front.New(t.Pkg(), poolBackend{t, move})
}

// poolBackend is the [front.Backend] of [Tables.Front].
type poolBackend struct {
	*Tables
	move Mover
}

func (b poolBackend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return b.move(ctx, sku, qty, dir, key)
}
