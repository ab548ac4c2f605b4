package sqlengine

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	refusal "github.com/stockkit/inventory/internal/refusals"
)

// Manager is what the SQL strategies optimistic and rowlock share, which
// each embeds in its own Manager: the methods of [inventory.StockManager]
// through the strategy's front (Init and Get on the pool, Reduce and
// Return through the strategy's own move), those of
// [inventory.OrderManager] through [Orders], and InTx. The zero Manager is
// not usable; make one with [NewManager].
type Manager struct {
	f front.Stock
	o *Orders // runs the order calls
}

// NewManager returns the shared part of a SQL strategy over o: Reduce and
// Return call move once the front validated them, refused locally for
// refusals (the strategy's WithRefusals, validated) when it is not zero.
func NewManager(o *Orders, move Mover, refusals time.Duration) Manager {
	f := Front(o.T, move)
	if refusals > 0 {
		f = f.WithRefusals(refusal.New(refusals))
	}
	return Manager{f: f, o: o}
}

// Init implements [inventory.StockManager].
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	return m.f.Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager].
func (m *Manager) Get(ctx context.Context, sku string) (int64, error) {
	return m.f.Get(ctx, sku)
}

// Reduce implements [inventory.StockManager].
func (m *Manager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.f.Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (m *Manager) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.f.Return(ctx, sku, qty, opts...)
}

// ReduceLines implements [inventory.OrderManager].
func (m *Manager) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.o.MoveLines(ctx, nil, lines, driver.DirReduce, opts)
}

// ReturnLines implements [inventory.OrderManager].
func (m *Manager) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.o.MoveLines(ctx, nil, lines, driver.DirReturn, opts)
}

// Reserve implements [inventory.OrderManager].
func (m *Manager) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return m.o.Reserve(ctx, nil, id, lines, ttl)
}

// Confirm implements [inventory.OrderManager]. Confirm of a hold past its
// TTL releases it in the same transaction and returns
// [inventory.ErrHoldReleased].
func (m *Manager) Confirm(ctx context.Context, id string) error {
	return m.o.Confirm(ctx, nil, id)
}

// Cancel implements [inventory.OrderManager].
func (m *Manager) Cancel(ctx context.Context, id string) error {
	return m.o.Cancel(ctx, nil, id)
}

// Held implements [inventory.OrderManager].
func (m *Manager) Held(ctx context.Context, sku string) (int64, error) {
	return m.o.Held(ctx, nil, sku)
}

// Sweep implements [inventory.OrderManager]: it releases up to the sweep
// limit of holds past their TTL, each in a transaction of its own, and
// deletes a batch of hold lines that ended more than the key TTL ago. A
// hold whose SKUs' rows stay locked past the lock wait is left for the
// next Sweep (or the call holding them releases it).
func (m *Manager) Sweep(ctx context.Context) (int, error) {
	return m.o.Sweep(ctx, nil)
}

// InTx returns the strategy's calls bound to tx, a transaction of the
// caller's on the strategy's database (see [Tx]). The value is for the
// goroutine that owns tx, and is good until tx ends.
func (m *Manager) InTx(tx *sqlx.Tx) *Tx { return BindTx(m.o, tx) }

var (
	_ inventory.StockManager = (*Manager)(nil)
	_ inventory.OrderManager = (*Manager)(nil)
	_ inventory.StockManager = (*Tx)(nil)
	_ inventory.OrderManager = (*Tx)(nil)
)
