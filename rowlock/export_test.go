package rowlock

import (
	"context"

	"github.com/stockkit/inventory/driver"
)

// SetAfterLock makes f run while a call holds its row locks, between its
// locks and its writes; set it before any call.
func SetAfterLock(m *Manager, f func(skus []string)) { m.o.AfterLock = f }

// Queued returns how many calls of sku wait for the SKU's transaction in
// flight, not yet taken into a batch.
func Queued(m *Manager, sku string) int { return m.comb.Len(sku) }

// MoveAlone is Reduce or Return (unvalidated) as every call was before
// calls combined: a keyed call's precheck, then a transaction of its own.
func MoveAlone(ctx context.Context, m *Manager, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if key != "" {
		if rem, err := m.t.Precheck(ctx, sku, qty, dir, key); err != nil {
			return rem, err
		}
	}
	return m.o.Move(ctx, nil, sku, qty, dir, key)
}
