package sqlengine

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/refusals"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/ledger"
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

// Strategy is what optimistic's and rowlock's New build their engine
// from, once they have checked their own options.
type Strategy struct {
	Config // the Tables' (see [New])
	// Orders is the order engine's settings; [Open] sets T, and clears
	// CAS on SQLite.
	Orders Orders
	// Refusals is the TTL of the face's local refusals (see [front.New]),
	// when RefusalsSet.
	Refusals    time.Duration
	RefusalsSet bool
}

// Open is what optimistic's and rowlock's New share: it checks the TTL of
// s's refusals, when set, builds the Tables over db ([New]) and the Orders
// over them, and returns the Orders and the face of the strategy whose
// Reduce and Return are move ([Orders.Front]). It does no I/O.
func Open(db *sqlx.DB, s Strategy, move Mover) (*Orders, Face, error) {
	var r *refusals.Table
	if s.RefusalsSet {
		if err := front.CheckRefusals(s.Pkg, s.Refusals); err != nil {
			return nil, Face{}, err
		}
		r = refusals.New(s.Refusals)
	}
	t, err := New(db, s.Config)
	if err != nil {
		return nil, Face{}, err
	}
	o := s.Orders
	o.T = t
	o.CAS = o.CAS && t.Engine != sqldialect.SQLite
	return &o, o.Front(move, r), nil
}

// Mover is a strategy's Reduce or Return of qty units of sku, keyed when
// key is not empty, after its face validated the call.
type Mover func(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error)

// Front returns the face of o's strategy over its own pool: Init and Get
// run on the pool, Reduce and Return through move, the order calls on o
// with no caller's transaction; r, if not nil, refuses locally (see
// [front.New]).
func (o *Orders) Front(move Mover, r *refusals.Table) Face {
	return Face{front.New(o.T.Pkg(), poolBackend{txBackend{o: o}, move}, r), o}
}

// Face is what optimistic's and rowlock's Managers embed: the [front.Front]
// of [Orders.Front] and the calls the two strategies share beside it.
type Face struct {
	face
	o *Orders
}

// InTx returns the Manager's calls bound to tx, a transaction of the
// caller's on the Manager's database: see "Inside a caller's transaction"
// in the package documentation. The value is for the goroutine that owns
// tx, and is good until tx ends.
func (f Face) InTx(tx *sqlx.Tx) *Tx { return BindTx(f.o, tx) }

// CreateTables creates the tables of the Manager's schema if they are
// absent: those of sqlstore.Store.CreateTables and, with WithLedger, the
// movement ledger's.
func (f Face) CreateTables(ctx context.Context) error { return f.o.T.CreateTables(ctx) }

// Entries implements [ledger.Reader]: the error wraps [ledger.ErrNotKept]
// unless the Manager was made with WithLedger.
func (f Face) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	return f.o.Entries(ctx, sku, after, limit)
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
	// optimistic's and rowlock's Managers are these by their Face.
	_ inventory.StockManager = Face{}
	_ inventory.OrderManager = Face{}
	_ ledger.Reader          = Face{}
)
