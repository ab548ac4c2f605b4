package sqlengine

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/refusals"
)

// Tx is a SQL strategy's (optimistic's, rowlock's) calls bound to a caller's transaction:
// optimistic.Tx and rowlock.Tx are this type. Its methods are those of an
// [inventory.StockManager] and of an [inventory.OrderManager] (validated
// and wrapped by the strategy's face), each run in a savepoint of the
// transaction; Get and Held read what the transaction sees, and Sweep
// releases every hold in the transaction. It is for the goroutine that
// owns the transaction, and good until it ends.
type Tx struct {
	face
}

// face is a [front.Front], embedded under a name of its own so that the
// field stays unexported.
type face = front.Front

// BindTx returns the calls of o bound to tx, a transaction of the caller's
// on o's database.
func BindTx(o *Orders, tx *sqlx.Tx) *Tx {
	return &Tx{front.New(o.T.Pkg(), txBackend{o, tx}, nil)}
}

// txBackend is the [front.Backend] of a Tx.
type txBackend struct {
	o  *Orders
	tx *sqlx.Tx
}

func (b txBackend) Init(ctx context.Context, sku string, qty int64) error {
	return b.o.Init(ctx, b.tx, sku, qty)
}

func (b txBackend) Get(ctx context.Context, sku string) (int64, error) {
	return b.o.T.GetOn(ctx, b.tx, sku)
}

func (b txBackend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return b.o.Move(ctx, b.tx, sku, qty, dir, key)
}

func (b txBackend) MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error {
	return b.o.MoveLines(ctx, b.tx, lines, dir, key)
}

func (b txBackend) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return b.o.Reserve(ctx, b.tx, id, lines, ttl)
}

func (b txBackend) Confirm(ctx context.Context, id string) error { return b.o.Confirm(ctx, b.tx, id) }
func (b txBackend) Cancel(ctx context.Context, id string) error  { return b.o.Cancel(ctx, b.tx, id) }
func (b txBackend) Held(ctx context.Context, sku string) (int64, error) {
	return b.o.Held(ctx, b.tx, sku)
}
func (b txBackend) Sweep(ctx context.Context) (int, error) { return b.o.Sweep(ctx, b.tx) }

// Mover is a strategy's Reduce or Return of qty units of sku, keyed when
// key is not empty, after its face validated the call.
type Mover func(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error)

// Front returns the face of o's strategy over its own pool: Init and Get
// run on the pool, Reduce and Return through move, the order calls on o
// with no caller's transaction; r, if not nil, refuses locally (see
// [front.New]).
func (o *Orders) Front(move Mover, r *refusals.Table) front.Front {
	return front.New(o.T.Pkg(), poolBackend{txBackend{o: o}, move}, r)
}

// poolBackend is the [front.Backend] of [Orders.Front]: a txBackend
// without a transaction, but for Init, Get and Move.
type poolBackend struct {
	txBackend
	move Mover
}

func (b poolBackend) Init(ctx context.Context, sku string, qty int64) error {
	return b.o.Init(ctx, nil, sku, qty)
}

func (b poolBackend) Get(ctx context.Context, sku string) (int64, error) {
	return b.o.T.Get(ctx, sku)
}

func (b poolBackend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return b.move(ctx, sku, qty, dir, key)
}

var (
	_ inventory.StockManager = (*Tx)(nil)
	_ inventory.OrderManager = (*Tx)(nil)
)
