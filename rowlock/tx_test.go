package rowlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/rowlock"
)

func TestInTx(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		m := newManager(t, db, sqltest.Schema(t, db))
		sqltest.InTx(t, db, m, func(tx *sqlx.Tx) sqltest.Manager { return m.InTx(tx) })
	})
}

// TestInTxLockUntilCommit: a Reduce inside the caller's transaction keeps
// the row locked until the caller commits: another connection cannot lock
// it (NOWAIT fails), and a Reduce of the Manager's own waits, then goes
// through once the caller commits.
func TestInTxLockUntilCommit(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		schema := sqltest.Schema(t, db)
		m := newManager(t, db, schema, rowlock.WithLockTimeout(30*time.Second))
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))

		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = m.InTx(tx).Reduce(ctx, sku, 1)
		require.NoError(t, err)

		if db.DriverName() != "sqlite" {
			// The caller's call has returned; its lock has not.
			other, err := db.BeginTxx(ctx, nil)
			require.NoError(t, err)
			var n int64
			err = other.QueryRowxContext(ctx, other.Rebind("SELECT stock FROM "+quote(db, schema.Table)+" WHERE sku = ? FOR UPDATE NOWAIT"), sku).Scan(&n)
			require.Error(t, err, "another connection locked the row the caller's transaction holds")
			t.Logf("NOWAIT while the caller's transaction is open: %v", err)
			_ = other.Rollback()
		}

		done := make(chan error, 1)
		var rem int64
		go func() {
			var err error
			rem, err = m.Reduce(ctx, sku, 1)
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("a second connection's Reduce went through while the caller's transaction held the row: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		require.NoError(t, tx.Commit())
		require.NoError(t, <-done)
		require.EqualValues(t, 8, rem, "after the caller's commit")
	})
}
