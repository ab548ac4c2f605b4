package tiered

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestRestoredMidSale is issue 29's attack on a private Redis: its
// append-only file copied mid-sale, more sales acknowledged (none synced:
// no syncer runs), Redis SIGKILLed and restarted from the copy at once.
// No call has to fail for the Manager to notice: the restart watch sees
// the new run_id on the first new connection, the recovery re-warms the
// SKU from SQL, and selling out never passes the stock. Before the watch,
// the restored allotment sold the forgotten sales again.
func TestRestoredMidSale(t *testing.T) {
	srv, m := privateManager(t, testenv.MySQL(t), WithChunk(100), WithLowWater(20), WithBreaker(3, 100*time.Millisecond))
	ctx := ctxT(t, 40*time.Second)
	const sku, initial = "a", 400
	require.NoError(t, m.Init(ctx, sku, initial))
	var acked, failed int64
	// sell makes up to n acknowledged Reduces of one unit (all when n < 0),
	// retrying the calls that fail, until the stock runs out.
	sell := func(n int) {
		for n != 0 {
			_, err := m.Reduce(ctx, sku, 1)
			switch {
			case err == nil:
				acked++
				n--
			case errors.Is(err, inventory.ErrInsufficientStock):
				if !m.br.open() {
					return
				}
				time.Sleep(20 * time.Millisecond) // the recovery re-warms Redis
			default:
				failed++
				require.Less(t, failed, int64(1000), "calls keep failing: %v", err)
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	sell(80)
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, srv.DataDir(), older) // while Redis serves: an older state
	sell(120)
	srv.Kill()
	copyDir(t, older, srv.DataDir())
	srv.Start()
	sell(-1)
	require.NoError(t, m.Drain(ctx))
	recs, _, _ := m.Recoveries()
	s := m.totals(ctx, t, sku)
	load, _ := exec.Command("cat", "/proc/loadavg").Output()
	t.Logf("FIGURES restored mid-sale: initial %d, acknowledged %d, oversold %d; calls failed %d; recoveries %d; SQL: sold %d, fallback %d, lost %d, pool %d; load %s",
		initial, acked, max(acked-initial, 0), failed, len(recs), s.sold, s.direct, s.lost, s.pool, strings.TrimSpace(string(load)))
	assert.LessOrEqual(t, acked, int64(initial), "oversold")
	require.NotEmpty(t, recs, "the restart was seen")
	assert.True(t, recs[len(recs)-1].Restarted)
	checkDrained(t, s, initial)
}
