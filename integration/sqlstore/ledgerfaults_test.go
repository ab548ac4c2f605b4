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
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

// abandonGrace is the abandon grace of the ledger fault tests' Managers
// (lockmgr.WithAbandonGrace): a Reserve that the crash cut between
// recording its order and holding its lines (or giving them back) leaves
// the order incomplete, and its retries with the same hold id say
// ErrContention until the order is abandoned, the grace after it was
// recorded; the retry then gives it up (its lines back) and takes effect.
// The default grace, a minute, would keep the buyer waiting that long.
const abandonGrace = 3 * time.Second

// ledgerKilled runs inventorytest.RunLedgerFaults on a private MariaDB
// and a private PostgreSQL (subtests named after the engines, in
// parallel), each SIGKILLed mid-sale and restarted on its data directory
// (crash recovery), on the lock strategy's Manager that newManager makes
// over s, a sqlstore.WithLedger Store on srv, its tables created: every
// move a call was told of has its entry, no entry lacks its move, keyed
// retries are recorded once, and each SKU replays to its stock. Holds are
// in: a Reserve the crash cut is taken over by its retry once abandoned
// (see abandonGrace).
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
					return m
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
		l, err := redislock.NewLocker(itest.FaultClient(t, faulttest.StartRedis(t).Addr(), time.Second))
		if err != nil {
			return nil, err
		}
		return lockmgr.NewManager(l, s, lockmgr.WithName("redislock"), lockmgr.WithAbandonGrace(abandonGrace))
	})
}

// TestLedgerSQLLockKilled: sqllock over sqlstore.WithLedger, its advisory
// locks and its stock in the killed database, so that the crash ends the
// locks' sessions with the stock's transactions; the locks have a pool
// of their own, as sqllock advises (see ledgerKilled).
func TestLedgerSQLLockKilled(t *testing.T) {
	ledgerKilled(t, func(t *testing.T, srv *faulttest.SQLServer, s *sqlstore.Store) (*lockmgr.Manager, error) {
		l, err := sqllock.NewLocker(srv.Open(t, 16))
		if err != nil {
			return nil, err
		}
		return lockmgr.NewManager(l, s, lockmgr.WithName("sqllock"), lockmgr.WithAbandonGrace(abandonGrace))
	})
}
