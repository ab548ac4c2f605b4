package redislock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// withoutOrders is m without its order methods, so that RunLedgerFaults
// sells with Reduce and Return only. With holds, a run fails now and then
// (on 2026-12-06, with a 3s abandon grace: redislock over redisstore 2
// runs of 17, the SQL engine subtests 6 of 14): a Reserve that the crash
// cut after it held its line leaves its order incomplete, and its retry,
// once the order is abandoned (lockmgr.WithAbandonGrace after it was
// recorded), gives the line back, recorded as Sweep records it (an expire
// entry of the hold), then reserves it again. The ledger adds up (the
// replay equals the stock), but RunLedgerFaults matches one entry per call
// and kind: it reports the expire entry as an entry without its move and
// the second reserve as a call recorded twice. The lock strategies over
// sqlstore.WithLedger are tested so in integration/sqlstore.
type withoutOrders struct {
	inventory.StockManager
	ledger.Reader
}

func hideOrders(m *lockmgr.Manager) inventory.StockManager { return withoutOrders{m, m} }

// TestLedgerRedisKilled runs inventorytest.RunLedgerFaults on redislock
// over redisstore.WithLedger, locks and stock in one private redis-server
// with appendonly yes and appendfsync always, SIGKILLed mid-sale and
// restarted from its append-only file (locks held at the kill come back
// with what is left of their 1s TTL). The stream's retention (maxLen) is
// above what the sale writes, so that no entry is trimmed. Nothing is
// lost (Lossy false): every move a call was told of has its entry, no
// entry lacks its move, keyed retries are recorded once, and each SKU
// replays to its stock. Holds are left out (see withoutOrders).
func TestLedgerRedisKilled(t *testing.T) {
	srv := faulttest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
		NewManager: func(t *testing.T) inventory.StockManager {
			c := faultClient(t, srv.Addr())
			s, err := redisstore.New(c, redisstore.WithLedger(100_000))
			require.NoError(t, err)
			m, err := redislock.New(c, s, redislock.WithTTL(time.Second))
			require.NoError(t, err)
			return hideOrders(m)
		},
		Kill:    srv.Kill,
		Restart: srv.Start,
	})
}
