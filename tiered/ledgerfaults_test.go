package tiered

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
)

// faultManager returns a ledger-keeping Manager over rdb and db, its
// tables created and its syncer running until t ends.
func faultManager(t *testing.T, e *env, opts ...Option) *Manager {
	m := e.manager(t, append([]Option{WithLedger(), WithBreaker(3, 200*time.Millisecond)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.CreateTables(ctx))
	syncing(t, m)
	return m
}

// TestLedgerFaultsRedisKilled runs the suite's ledger fault part
// (inventorytest.RunLedgerFaults) on tiered over a private redis-server
// (appendonly yes, appendfsync always) SIGKILLed mid-sale and restarted on
// its data, with MariaDB behind it and a syncer running, with the stock
// calls (Reduce and Return, keyed and not) and the holds.
//
// Not Lossy: this Redis forgets no move it acknowledged (its journal and
// its keys come back), and the restart fence, which drops Redis's state of
// every SKU and re-warms it from SQL, syncs each SKU's journal first. The
// allotment and the holds it drops are written off (ledger.Lost and
// ledger.LostHeld), which the suite counts in the replay and matches with
// no call (DropsHolds: a Confirm of a hold dropped says ErrHoldReleased,
// a Cancel of it finds nothing to give back). A Reserve cut by the kill after it made its record is taken
// over by its retry (a new incarnation of the record, the cut attempt's
// parts given back), so every hold ends known.
func TestLedgerFaultsRedisKilled(t *testing.T) {
	srv := faulttest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb, testenv.MySQL(t))
	var m *Manager
	res := inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
		NewManager: func(t *testing.T) inventory.StockManager {
			m = faultManager(t, e)
			return m
		},
		Kill:       srv.Kill,
		Restart:    srv.Start,
		DropsHolds: true,
	})
	recs, failed, _ := m.Recoveries()
	restarted := false
	for _, r := range recs {
		restarted = restarted || r.Restarted
	}
	assert.True(t, restarted, "a recovery saw the restart: %+v", recs)
	assert.Positive(t, res.WrittenOff, "the fence wrote off the allotment it dropped")

	var lost int64
	for _, d := range recsDrifts(recs) {
		lost += d.Lost
	}
	if failed == 0 { // a recovery that failed may have written off what it recorded lost
		assert.Equal(t, lost, res.WrittenOff, "the write-offs are the units the recoveries recorded lost")
	}
	t.Logf("%d recoveries (%d failed), %d units recorded lost; %d units written off; %d fallback calls",
		len(recs), failed, lost, res.WrittenOff, m.Fallbacks())
}

// TestLedgerFaultsMariaDBKilled runs the suite's ledger fault part on
// tiered over the shared Redis and a private MariaDB SIGKILLed mid-sale
// and restarted on its data (InnoDB's crash recovery), with a syncer
// running. Small chunks make calls need grants, which fail while MariaDB
// is down; Redis sells its allotment meanwhile, and its journal waits
// for the syncer. Nothing is lost (no Lossy): a sync transaction the kill
// cut either committed, entries and ledger rows together, or did not, and
// its entries are applied again.
func TestLedgerFaultsMariaDBKilled(t *testing.T) {
	srv := faulttest.StartMariaDB(t)
	e := newEnv(t, testenv.Redis(t), srv.Open(t, 32))
	res := inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
		NewManager: func(t *testing.T) inventory.StockManager {
			return faultManager(t, e, WithChunk(5), WithLowWater(2))
		},
		Kill:    srv.Kill,
		Restart: srv.Start,
	})
	assert.Zero(t, res.WrittenOff, "nothing was lost")
}
