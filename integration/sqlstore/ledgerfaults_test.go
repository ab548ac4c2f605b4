package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

// withoutOrders is a lock strategy's Manager without its order methods,
// so that RunLedgerFaults sells with Reduce and Return only: with holds,
// a Reserve that the crash cut midway leaves its order incomplete, and its
// retries say ErrContention until the order is abandoned, minutes after
// the suite's bound (see integration/redislock's withoutOrders).
type withoutOrders struct {
	inventory.StockManager
	ledger.Reader
}

// TestLedgerSQLLockKilled runs inventorytest.RunLedgerFaults on sqllock
// over sqlstore.WithLedger, its advisory locks and its stock in the same
// private MariaDB or PostgreSQL, SIGKILLed mid-sale and restarted on its
// data directory: the crash ends the locks' sessions with the stock's
// transactions. The locks have a pool of their own, as sqllock advises.
// Every move a call was told of has its entry, no entry lacks its move,
// keyed retries are recorded once, and each SKU replays to its stock.
// Holds are left out (see withoutOrders).
func TestLedgerSQLLockKilled(t *testing.T) {
	for _, eng := range faulttest.SQLEngines {
		t.Run(eng.Name, func(t *testing.T) {
			t.Parallel()
			srv := eng.Start(t)
			s, err := sqlstore.New(srv.Open(t, 16), sqlstore.WithLedger())
			require.NoError(t, err)
			require.NoError(t, s.CreateTables(context.Background()))
			inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
				NewManager: func(t *testing.T) inventory.StockManager {
					m, err := sqllock.New(srv.Open(t, 16), s)
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
