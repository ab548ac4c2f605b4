package tiered

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/testenv"
)

// TestRestoredMidSale is issue 29's attack on a private Redis: its
// append-only file copied mid-sale, more sales acknowledged (none synced:
// no syncer runs), Redis SIGKILLed and restarted from the copy at once.
// No call has to fail for the Manager to notice: the restart watch sees
// the new run_id on the first new connection, the recovery re-warms the
// SKU from SQL, and selling out never passes the stock. Trusting restarts
// (as before the watch), the restored allotment sells the forgotten sales
// again: nothing else can tell them.
func TestRestoredMidSale(t *testing.T) {
	onFenceModes(t, func(t *testing.T, name string, trust bool, _ []Option) {
		opts := []Option{WithChunk(100), WithLowWater(20), WithBreaker(3, 100*time.Millisecond)}
		if trust {
			opts = append(opts, WithTrustRestarts())
		}
		srv, m := privateManager(t, testenv.MySQL(t), opts...)
		ctx := ctxT(t, 40*time.Second)
		const sku, initial = "a", 400
		require.NoError(t, m.Init(ctx, sku, initial))
		s := &seller{m: m}
		s.sell(ctx, t, sku, 80, 0, nil)
		older := filepath.Join(t.TempDir(), "older")
		copyDir(t, srv.DataDir(), older) // while Redis serves: an older state
		s.sell(ctx, t, sku, 120, 0, nil)
		srv.Kill()
		copyDir(t, older, srv.DataDir())
		srv.Start()
		require.True(t, s.sell(ctx, t, sku, -1, 0, nil), "sold out")
		r := fenceFigures(ctx, t, m, "restored mid-sale, "+name, sku, initial, s.acked.Load(), s.failed.Load())
		assert.Positive(t, r.forgotten, "the restored Redis forgot sales")
		if trust {
			assert.Positive(t, r.over, "trusted, the forgotten sales are sold again")
			assert.LessOrEqual(t, r.over, r.forgotten)
			return
		}
		assert.Zero(t, r.over, "oversold")
		assert.True(t, r.restarted, "the restart was seen")
		assert.LessOrEqual(t, r.forgotten, r.reported, "the recovery reported them as lost")
	})
}
