package tiered

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestWarmedSale warms every SKU into an emptied Redis before a sale, sells
// them out with 64 buyers, and reports how many calls had to wait for a
// grant (the refills run in the background; the figure is logged, not
// asserted, as it depends on timing).
func TestWarmedSale(t *testing.T) {
	rdb := testenv.Redis(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			m := e.manager(t, WithChunk(200), WithLowWater(150))
			ctx := ctxT(t, 2*time.Minute)
			const initial, buyers = 2000, 64
			skus := []string{"x", "y", "z"}
			for _, sku := range skus {
				require.NoError(t, m.Init(ctx, sku, initial))
				require.NoError(t, rdb.Del(ctx, m.stateKey(sku)).Err(), "Redis emptied before the sale")
			}
			n, err := m.Warm(ctx)
			require.NoError(t, err)
			assert.Equal(t, len(skus), n)
			for _, sku := range skus {
				s := m.totals(ctx, t, sku)
				assert.EqualValues(t, 200, s.allot, "first chunk granted by the warm-up")
				v, err := m.Get(ctx, sku)
				require.NoError(t, err)
				assert.EqualValues(t, initial, v)
			}
			var wg sync.WaitGroup
			sold := make([]int64, buyers)
			for i := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						sku := skus[i%len(skus)]
						_, err := m.Reduce(ctx, sku, 1)
						if errors.Is(err, inventory.ErrInsufficientStock) {
							return
						}
						if !errors.Is(err, inventory.ErrContention) && assert.NoError(t, err) {
							sold[i]++
						}
					}
				}()
			}
			wg.Wait()
			require.NoError(t, m.Drain(ctx))
			var total int64
			for _, s := range sold {
				total += s
			}
			assert.EqualValues(t, initial*int64(len(skus)), total)
			grants := int64(0)
			for _, sku := range skus {
				s := m.totals(ctx, t, sku)
				checkDrained(t, s, initial)
				assert.EqualValues(t, initial, s.sold, sku)
				grants += s.last
			}
			t.Logf("%s: %d units sold by %d buyers over %d SKUs, %d grants, %d calls waited for a grant, %d refill failures",
				eng.name, total, buyers, len(skus), grants, m.Stalls(), m.RefillFailures())
		})
	}
}
