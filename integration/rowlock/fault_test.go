package rowlock_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/sqlfault"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// TestFaults runs the SQL strategies' fault suite (see sqlfault.Suite). A
// connection killed while it holds the row lock takes its transaction with
// it.
func TestFaults(t *testing.T) {
	sqlfault.Suite(t, "rowlock", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) []inventory.StockManager {
		return []inventory.StockManager{newManager(t, db, schema)}
	})
}

// TestStalledServer: while the server hangs, every call returns within its
// deadline plus inventory.DeadlineSlack, and the calls that failed are
// applied at most once, as their keyed retries show; with the movement
// ledger too, unkeyed calls among them.
func TestStalledServer(t *testing.T) {
	sqlfault.Stall(t, "rowlock", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager {
		return newManager(t, db, schema)
	})
	t.Run("ledger", func(t *testing.T) {
		sqlfault.StallWith(t, "rowlock", true, func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager {
			m := newManager(t, db, schema, rowlock.WithLedger())
			require.NoError(t, m.CreateTables(context.Background()))
			return m
		})
	})
}
