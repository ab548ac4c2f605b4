package optimistic_test

import (
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/optimistic"
)

// TestLedgerServerKilled runs inventorytest.RunLedgerFaults on a private
// MariaDB and a private PostgreSQL, each SIGKILLed mid-sale and restarted
// on its data directory (crash recovery), with the calls alternating
// between both modes, combining and single-statement: every move a call
// was told of has its entry, no entry lacks its move, keyed retries are
// recorded once, and each SKU replays to its stock.
func TestLedgerServerKilled(t *testing.T) {
	faulttest.SQLLedgerKilled(t, 100, func(t *testing.T, db *sqlx.DB) []faulttest.LedgerManager {
		combining, err := optimistic.New(db, optimistic.WithLedger())
		require.NoError(t, err)
		single, err := optimistic.New(db, optimistic.WithLedger(), optimistic.WithSingleStatement())
		require.NoError(t, err)
		return []faulttest.LedgerManager{combining, single}
	})
}
