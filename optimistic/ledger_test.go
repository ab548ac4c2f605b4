package optimistic_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/optimistic"
)

// TestLedger runs the suite's ledger part on Managers made with
// WithLedger, combining and in single-statement mode, on every engine.
func TestLedger(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []optimistic.Option
	}{
		{"cas", nil},
		{"single", []optimistic.Option{optimistic.WithSingleStatement()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
				schema := sqltest.Schema(t, db)
				inventorytest.RunLedger(t, inventorytest.Config{
					Timeout: 5 * time.Minute,
					NewManager: func(t *testing.T) inventory.StockManager {
						m := newManager(t, db, schema, append(mode.opts, optimistic.WithLedger())...)
						require.NoError(t, m.CreateTables(context.Background()))
						return m
					},
				})
			})
		})
	}
}

// TestLedgerInTx: in a caller's transaction, the entries commit and roll
// back with it.
func TestLedgerInTx(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		m := newManager(t, db, sqltest.Schema(t, db), optimistic.WithLedger())
		require.NoError(t, m.CreateTables(context.Background()))
		sqltest.LedgerInTx(t, db, m, func(tx *sqlx.Tx) inventory.StockManager { return m.InTx(tx) })
	})
}

// TestLedgerStatements counts the statements a call sends (MariaDB's
// session counter Questions, on a pool of one connection): without a
// ledger an unkeyed Reduce is one statement and a keyed one its
// transaction's (BEGIN, UPDATE, the key's INSERT, COMMIT, and database/sql's
// own COMMIT after it); with a ledger, the keyed one sends one more (the
// INSERT of its entry) and the unkeyed one is still one statement: the
// compound statement that runs its UPDATE and its entry's INSERT in a
// transaction of its own.
func TestLedgerStatements(t *testing.T) {
	db := sqltest.Open(t, "mariadb")
	db.SetMaxOpenConns(1)
	schema := sqltest.Schema(t, db)
	ctx := context.Background()
	questions := func() int64 {
		var name string
		var n int64
		require.NoError(t, db.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n))
		return n
	}
	count := func(call func() error) int64 {
		before := questions()
		require.NoError(t, call())
		return questions() - before - 1 // the SHOW of before
	}
	sends := map[bool][2]int64{} // ledger: unkeyed, keyed
	for _, on := range []bool{false, true} {
		var opts []optimistic.Option
		if on {
			opts = append(opts, optimistic.WithLedger())
		}
		m := newManager(t, db, schema, opts...)
		require.NoError(t, m.CreateTables(ctx))
		sku := fmt.Sprint(testenv.Prefix(), on)
		require.NoError(t, m.Init(ctx, sku, 100))
		reduce := func(opts ...inventory.Option) func() error {
			return func() error { _, err := m.Reduce(ctx, sku, 1, opts...); return err }
		}
		require.NoError(t, reduce()()) // prepares the statements
		require.NoError(t, reduce(inventory.WithKey("warm"))())
		sends[on] = [2]int64{count(reduce()), count(reduce(inventory.WithKey("k")))}
	}
	t.Logf("statements sent by Reduce (unkeyed, keyed): ledger off %v, on %v", sends[false], sends[true])
	require.EqualValues(t, 1, sends[false][0], "an unkeyed Reduce without a ledger is one statement")
	require.EqualValues(t, 5, sends[false][1], "a keyed Reduce without a ledger: BEGIN, UPDATE, INSERT, COMMIT, COMMIT")
	require.EqualValues(t, 1, sends[true][0], "an unkeyed Reduce with a ledger: one compound statement")
	require.Equal(t, sends[false][1]+1, sends[true][1], "a keyed Reduce with a ledger: the INSERT more")
}

// TestLedgerRuns: combined unkeyed calls with no reference are written as
// runs, a row each, and still read back as one entry per call that took
// effect, replaying to the stock; calls of other sizes, refused ones and
// calls with a reference or a key break the runs.
func TestLedgerRuns(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		schema := sqltest.Schema(t, db)
		m := newManager(t, db, schema, optimistic.WithLedger())
		require.NoError(t, m.CreateTables(ctx))
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 500))
		faulttest.LedgerRuns(t, m, sku, 30, 25)
		q := `"`
		if db.DriverName() == "mysql" {
			q = "`"
		}
		var longest int64
		require.NoError(t, db.GetContext(ctx, &longest, db.Rebind("SELECT MAX(n) FROM "+q+sqldialect.MovesTable(sqldialect.Schema(schema))+q+" WHERE sku = ?"), sku))
		require.Greater(t, longest, int64(1), "a run of entries in one row")
	})
}
