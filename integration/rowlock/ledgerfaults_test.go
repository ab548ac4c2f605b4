package rowlock_test

import (
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/rowlock"
)

// TestLedgerServerKilled runs inventorytest.RunLedgerFaults on a private
// MariaDB and a private PostgreSQL, each SIGKILLed mid-sale and restarted
// on its data directory (crash recovery): every move a call was told of
// has its entry, no entry lacks its move, keyed retries are recorded once,
// and each SKU replays to its stock.
func TestLedgerServerKilled(t *testing.T) {
	faulttest.SQLLedgerKilled(t, 80, func(t *testing.T, db *sqlx.DB) []faulttest.LedgerManager {
		m, err := rowlock.New(db, rowlock.WithLedger())
		require.NoError(t, err)
		return []faulttest.LedgerManager{m}
	})
}
