package segment

import (
	"context"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// The order calls of [inventory.OrderManager] are the order engine's
// (m.o, sqlengine.Orders over segRows: move.go), each tried again, as a
// move is, when the database broke its transaction off (ErrContention:
// nothing changed). Held is the Manager's own: the engine's reads the
// stock table.

// MoveLines implements [front.Backend]: ReduceLines or ReturnLines.
func (b *sqlBackend) MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error {
	return b.retry(ctx, func() error { return b.o.MoveLines(ctx, nil, lines, dir, key) })
}

// Reserve implements [front.Backend].
func (b *sqlBackend) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return b.retry(ctx, func() error { return b.o.Reserve(ctx, nil, id, lines, ttl) })
}

// Confirm implements [front.Backend].
func (b *sqlBackend) Confirm(ctx context.Context, id string) error {
	return b.retry(ctx, func() error { return b.o.Confirm(ctx, nil, id) })
}

// Cancel implements [front.Backend].
func (b *sqlBackend) Cancel(ctx context.Context, id string) error {
	return b.retry(ctx, func() error { return b.o.Cancel(ctx, nil, id) })
}

// Sweep implements [front.Backend]: see [sqlengine.Orders.Sweep].
func (b *sqlBackend) Sweep(ctx context.Context) (int, error) { return b.o.Sweep(ctx, nil) }

// Held implements [front.Backend]: the units of the SKU's held lines,
// those past their TTL included, as of one statement.
func (b *sqlBackend) Held(ctx context.Context, sku string) (int64, error) {
	var held, segs int64
	if err := b.t.DB.QueryRowxContext(ctx, b.q.held, sku, sku).Scan(&held, &segs); err != nil {
		return 0, b.t.Err(ctx, "held", err)
	}
	if segs == 0 {
		return 0, b.t.NotFound(sku)
	}
	return held, nil
}

func (b *sqlBackend) retry(ctx context.Context, fn func() error) error {
	return (*Manager)(b).retry(ctx, fn)
}
