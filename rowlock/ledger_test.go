package rowlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/rowlock"
)

// TestLedger runs the suite's ledger part on Managers made with
// WithLedger, on every engine.
func TestLedger(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		inventorytest.RunLedger(t, inventorytest.Config{
			Timeout: 5 * time.Minute,
			NewManager: func(t *testing.T) inventory.StockManager {
				m := newManager(t, db, schema, rowlock.WithLedger())
				require.NoError(t, m.CreateTables(context.Background()))
				return m
			},
		})
	})
}

// TestLedgerInTx: in a caller's transaction, the entries commit and roll
// back with it.
func TestLedgerInTx(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		m := newManager(t, db, sqltest.Schema(t, db), rowlock.WithLedger())
		require.NoError(t, m.CreateTables(context.Background()))
		sqltest.LedgerInTx(t, db, m, func(tx *sqlx.Tx) inventory.StockManager { return m.InTx(tx) })
	})
}
