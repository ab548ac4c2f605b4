package redislock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// abandonGrace is the abandon grace of the ledger fault tests' Managers
// (lockmgr.WithAbandonGrace): a Reserve that the crash cut between
// recording its order and holding its lines (or giving them back) leaves
// the order incomplete, and its retries with the same hold id say
// ErrContention until the order is abandoned, the grace after it was
// recorded; the retry then gives it up (its lines back) and takes effect.
// The default grace, a minute, would keep the buyer waiting that long.
const abandonGrace = 3 * time.Second

// TestLedgerRedisKilled runs inventorytest.RunLedgerFaults on redislock
// over redisstore.WithLedger, locks and stock in one private redis-server
// with appendonly yes and appendfsync always, SIGKILLed mid-sale and
// restarted from its append-only file (locks held at the kill come back
// with what is left of their 1s TTL). The stream's retention (maxLen) is
// above what the sale writes, so that no entry is trimmed. Nothing is
// lost (Lossy false): every move a call was told of has its entry, no
// entry lacks its move, keyed retries are recorded once, and each SKU
// replays to its stock. Holds are in: a Reserve the crash cut is taken
// over by its retry once abandoned (see abandonGrace).
func TestLedgerRedisKilled(t *testing.T) {
	srv := faulttest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
		NewManager: func(t *testing.T) inventory.StockManager {
			c := faultClient(t, srv.Addr())
			s, err := redisstore.New(c, redisstore.WithLedger(100_000))
			require.NoError(t, err)
			l, err := redislock.NewLocker(c, redislock.WithTTL(time.Second))
			require.NoError(t, err)
			m, err := lockmgr.NewManager(l, s, lockmgr.WithName("redislock"), lockmgr.WithAbandonGrace(abandonGrace))
			require.NoError(t, err)
			return m
		},
		Kill:    srv.Kill,
		Restart: srv.Start,
	})
}
