package optimistic_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
)

func TestInTx(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		m := newManager(t, db, sqltest.Schema(t, db))
		sqltest.InTx(t, db, m, func(tx *sqlx.Tx) sqltest.Manager { return m.InTx(tx) })
	})
}

// TestInTxContention: a call inside the caller's transaction that finds
// its row moved by another writer since the transaction read it, so that
// the call no longer fits, returns ErrContention and changes nothing; the
// caller retries the whole transaction, which then sees the truth.
func TestInTxContention(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		if db.DriverName() == "sqlite" {
			t.Skip("SQLite: the caller's transaction holds the write lock from BEGIN, no other writer can move the row under it")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m := newManager(t, db, sqltest.Schema(t, db))
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))

		// On PostgreSQL a repeatable-read transaction, as MySQL's default:
		// its reads see the snapshot of its first statement.
		tx, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		in := m.InTx(tx)
		n, err := in.Get(ctx, sku) // the caller's transaction reads
		require.NoError(t, err)
		require.EqualValues(t, 10, n)
		_, err = m.Reduce(ctx, sku, 9) // another writer takes most of it
		require.NoError(t, err)
		_, err = in.Reduce(ctx, sku, 2, inventory.WithKey("k"))
		require.ErrorIs(t, err, inventory.ErrContention)
		t.Logf("in the caller's transaction: %v", err)
		require.NoError(t, tx.Rollback())

		tx, err = db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		require.NoError(t, err)
		rem, err := m.InTx(tx).Reduce(ctx, sku, 2, inventory.WithKey("k"))
		require.ErrorIs(t, err, inventory.ErrInsufficientStock, "the retried transaction")
		require.EqualValues(t, 1, rem)
		rem, err = m.InTx(tx).Reduce(ctx, sku, 1, inventory.WithKey("k"))
		require.NoError(t, err, "the key was not used up")
		require.Zero(t, rem)
		require.NoError(t, tx.Commit())
		n, err = m.Get(ctx, sku)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}
