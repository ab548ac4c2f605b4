// Package refusalstest checks a strategy's WithRefusals from outside: a
// Manager that refuses locally and a plain one on the same backend.
package refusalstest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/front"
)

// Run checks that m (made with WithRefusals(ttl)) refuses a Reduce without
// asking its backend while a refusal of the SKU is younger than ttl and the
// stock seen is below the quantity, and only then; that plain (a Manager
// without refusals on the same backend) adding units is missed for at most
// ttl; that m's own Return and Init, and keyed calls, always reach the
// backend; and that under concurrency nothing is sold beyond the stock.
// sku must be unused; ttl must leave room for a few calls (100ms or more).
func Run(t *testing.T, m, plain inventory.StockManager, sku string, ttl time.Duration) {
	ctx := context.Background()
	here := func(err error) bool { return errors.Is(err, front.ErrRefusedHere) }

	require.NoError(t, m.Init(ctx, sku, 3))
	start := time.Now() // the refusal is younger than the time since
	left, err := m.Reduce(ctx, sku, 5)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock, "the backend refuses")
	require.False(t, here(err))
	require.EqualValues(t, 3, left)

	// Units another Manager adds are not seen while the refusal is young:
	// the calls are refused in the process (the backend would sell them).
	asked := time.Now()
	_, err = plain.Return(ctx, sku, 10)
	require.NoError(t, err)
	// Checked only while the refusal is young by the client's clock since
	// before the call that made it: a loaded machine may get here late.
	young := 0
	for ; time.Since(asked) < ttl/2; young++ {
		left, err = m.Reduce(ctx, sku, 4)
		if time.Since(start) >= ttl {
			if err == nil { // the refusal aged out and the backend sold: give the units back
				_, err = plain.Return(ctx, sku, 4)
				require.NoError(t, err)
			}
			break
		}
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
		require.True(t, here(err), "refused in the process: %v", err)
		require.EqualValues(t, 3, left, "the stock seen")
	}
	if young == 0 {
		t.Logf("not checked that calls are refused in the process: getting there took %v of the refusal's %v", time.Since(start).Round(time.Millisecond), ttl)
	}
	left, err = m.Reduce(ctx, sku, 3)
	require.NoError(t, err, "a Reduce that fits the stock seen goes to the backend")
	require.EqualValues(t, 10, left)

	// Past the TTL the backend is asked again.
	_, err = m.Reduce(ctx, sku, 11) // refused, here or by the backend
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = plain.Return(ctx, sku, 1)
	require.NoError(t, err)
	time.Sleep(ttl + 10*time.Millisecond)
	left, err = m.Reduce(ctx, sku, 11)
	require.NoError(t, err, "past the TTL")
	require.Zero(t, left)

	// Keyed calls always reach the backend.
	_, err = m.Reduce(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = plain.Return(ctx, sku, 2)
	require.NoError(t, err)
	left, err = m.Reduce(ctx, sku, 1, inventory.WithKey("refusals-k"))
	require.NoError(t, err, "a keyed call goes to the backend")
	require.EqualValues(t, 1, left)
	left, err = m.Reduce(ctx, sku, 1, inventory.WithKey("refusals-k"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "a keyed repeat is told it took effect")
	require.EqualValues(t, 1, left)

	// m's own Return and Init end the refusals at once.
	_, err = m.Reduce(ctx, sku, 100)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Return(ctx, sku, 99)
	require.NoError(t, err)
	left, err = m.Reduce(ctx, sku, 100)
	require.NoError(t, err, "its own Return: refusals end")
	require.Zero(t, left)
	_, err = m.Reduce(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.NoError(t, m.Init(ctx, sku, 1))
	_, err = m.Reduce(ctx, sku, 1)
	require.NoError(t, err, "its own Init: refusals end")

	// A sale with Returns beside it: every sale is the backend's.
	const initial, buyers, tries, returns = 50, 32, 100, 20
	require.NoError(t, m.Init(ctx, sku, initial))
	var sold, returned, local atomic.Int64
	var wg sync.WaitGroup
	for range buyers {
		wg.Go(func() {
			for range tries {
				_, err := m.Reduce(ctx, sku, 1)
				switch {
				case err == nil:
					sold.Add(1)
				case here(err):
					local.Add(1)
				default:
					if !errors.Is(err, inventory.ErrInsufficientStock) {
						t.Errorf("reduce: %v", err)
						return
					}
				}
			}
		})
	}
	var once sync.Once
	wg.Go(func() {
		for range returns {
			time.Sleep(2 * time.Millisecond)
			if _, err := plain.Return(ctx, sku, 1); err != nil {
				once.Do(func() { t.Errorf("return: %v", err) })
				return
			}
			returned.Add(1)
		}
	})
	wg.Wait()
	left, err = plain.Get(ctx, sku)
	require.NoError(t, err)
	require.EqualValues(t, initial+returned.Load()-sold.Load(), left, "sold %d, returned %d", sold.Load(), returned.Load())
	require.GreaterOrEqual(t, left, int64(0))
	require.Positive(t, local.Load(), "some calls were refused in the process")
}
