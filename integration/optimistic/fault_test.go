package optimistic_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/sqlfault"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

// TestFaults runs the SQL strategies' fault suite (see sqlfault.Suite) over
// both modes, the version compare-and-set and the single statement, on the
// same rows, call by call in turn.
func TestFaults(t *testing.T) {
	sqlfault.Suite(t, "optimistic", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) []inventory.StockManager {
		return []inventory.StockManager{newManager(t, db, schema), newManager(t, db, schema, optimistic.WithSingleStatement())}
	})
}

// TestStalledServer: while the server hangs, every call returns within its
// deadline plus inventory.DeadlineSlack, in both modes, and the calls that
// failed are applied at most once, as their keyed retries show. With the
// movement ledger, unkeyed calls among them: their batches write the
// UPDATE and the entries in one statement (PostgreSQL, MariaDB), which
// must give up with the rest.
func TestStalledServer(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []optimistic.Option
	}{
		{"combining", nil}, {"single", []optimistic.Option{optimistic.WithSingleStatement()}},
		{"ledger", []optimistic.Option{optimistic.WithLedger()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ledger := mode.name == "ledger"
			sqlfault.StallWith(t, "optimistic", ledger, func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager {
				m := newManager(t, db, schema, mode.opts...)
				if ledger {
					require.NoError(t, m.CreateTables(context.Background()))
				}
				return m
			})
		})
	}
}
