package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

// TestLedger runs the suite's ledger part on sqllock over
// sqlstore.WithLedger, on each engine of its locks.
func TestLedger(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			locks, db := sqltest.Open(t, engine), sqltest.Open(t, engine)
			schema := sqltest.Schema(t, db)
			inventorytest.RunLedger(t, inventorytest.Config{
				Timeout: 5 * time.Minute,
				NewManager: func(t *testing.T) inventory.StockManager {
					s, err := sqlstore.New(db, sqlstore.WithSchema(schema), sqlstore.WithLedger())
					require.NoError(t, err)
					require.NoError(t, s.CreateTables(context.Background()))
					m, err := sqllock.New(locks, s)
					require.NoError(t, err)
					return m
				},
			})
		})
	}
}
