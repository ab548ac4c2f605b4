package sqlengine_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestPreparedMove: on MySQL and SQLite, a move through the pool runs as a
// statement prepared once, and keeps its answers: the new stock, a
// refusal, the holds guard, a move in a transaction (as text), and a move
// after the table was dropped and created again under the prepared
// statement.
func TestPreparedMove(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := testenv.Prefix()
		schema := sqldialect.Schema{Table: "stock_" + p, Ledger: "ledger_" + p, Holds: "holds_" + p, Orders: "orders_" + p}
		sqltest.Drop(t, db, schema.Table, schema.Ledger, schema.Holds, schema.Orders)
		tb := sqltest.Tables(t, db, sqlengine.Config{Schema: schema})
		require.False(t, tb.Prepared("move"), "New prepares nothing")
		require.NoError(t, tb.CreateTables(ctx))
		sku := testenv.Prefix()
		require.NoError(t, tb.Init(ctx, sku, 10))

		n, ok, err := tb.Move(ctx, db, sku, -3, 3, math.MaxInt64)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 7, n)
		require.Equal(t, tb.Engine != sqldialect.Postgres, tb.Prepared("move"), "prepared on MySQL and SQLite (pgx caches its own)")
		n, ok, err = tb.Move(ctx, db, sku, -2, 2, math.MaxInt64)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 5, n, "the second run of the prepared statement")
		_, ok, err = tb.Move(ctx, db, sku, -6, 6, math.MaxInt64)
		require.NoError(t, err)
		require.False(t, ok, "out of range")
		n, ok, err = tb.Shift(ctx, db, sku, 1, 0, math.MaxInt64-1)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 6, n)

		// An expired hold stops the prepared move as it stops the text.
		hq := `INSERT INTO ` + schema.Holds + ` (hold_id, sku, qty, state, expires_at) VALUES (?, ?, 1, 'held', 1)`
		_, err = db.ExecContext(ctx, db.Rebind(hq), "h-"+sku, sku)
		require.NoError(t, err)
		_, ok, err = tb.Move(ctx, db, sku, -1, 1, math.MaxInt64)
		require.NoError(t, err)
		require.False(t, ok, "an expired hold to release first")
		n, ok, err = tb.Shift(ctx, db, sku, -1, 1, math.MaxInt64)
		require.NoError(t, err)
		require.True(t, ok, "shift has no holds guard")
		require.EqualValues(t, 5, n)

		// In a transaction of the Tables' own, the prepared statements;
		// in a caller's, the text: both give the same answers.
		prepared := tb.Engine != sqldialect.Postgres
		require.False(t, tb.Prepared("lockHolds"))
		require.NoError(t, tb.Tx(ctx, func(tx *sqlx.Tx) error {
			r, err := tb.LockHolds(ctx, tx, sku)
			require.NoError(t, err)
			require.Equal(t, sqlengine.Row{Stock: 5, Version: 5, Expired: true}, r)
			require.Equal(t, prepared, tb.Prepared("lockHolds"))
			_, ok, err := tb.Move(ctx, tx, sku, -1, 1, math.MaxInt64)
			require.False(t, ok, "in a transaction too")
			require.NoError(t, err)
			ok, err = tb.Set(ctx, tx, sku, 5, 9)
			require.True(t, ok)
			require.Equal(t, prepared, tb.Prepared("set"))
			return err
		}))
		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		r, err := tb.LockHolds(ctx, tx, sku)
		require.NoError(t, err)
		require.Equal(t, sqlengine.Row{Stock: 9, Version: 6, Expired: true}, r, "the committed Set")
		ok, err = tb.Set(ctx, tx, sku, 5, 1)
		require.NoError(t, err)
		require.False(t, ok, "stale version")
		require.NoError(t, tx.Rollback())

		// The tables again, under the prepared statement: the server
		// prepares it again by itself.
		q := `"`
		if db.DriverName() == "mysql" {
			q = "`"
		}
		for _, name := range []string{schema.Table, schema.Ledger, schema.Holds, schema.Orders} {
			_, err := db.ExecContext(ctx, "DROP TABLE "+q+name+q)
			require.NoError(t, err)
		}
		require.NoError(t, tb.CreateTables(ctx))
		require.NoError(t, tb.Init(ctx, sku, 4))
		n, ok, err = tb.Move(ctx, db, sku, -4, 4, math.MaxInt64)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 0, n)
	})
}

// TestPrepareWaitEndsWithCtx: a call whose statement another call is
// preparing (on a stalled server, until that call's own deadline) waits
// for its turn only while its ctx lasts, then returns ctx's error, having
// run nothing; the statement is prepared later, by the next call.
func TestPrepareWaitEndsWithCtx(t *testing.T) {
	db := testenv.SQLite(t)
	tb := sqltest.Tables(t, db, sqlengine.Config{})
	sku := testenv.Prefix()
	bg, stop := context.WithTimeout(context.Background(), 30*time.Second) // a bound for a broken run only
	defer stop()
	require.NoError(t, tb.Init(bg, sku, 5))
	release := tb.HoldPrepare("move")
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.Move(ctx, db, sku, -1, 1, math.MaxInt64)
		done <- err
	}()
	cancel()
	var err error
	select {
	case err = <-done:
	case <-bg.Done():
		release() // the broken run's call goes on once the prepare is over
		<-done
		t.Fatal("the call waited for another's prepare past its ctx")
	}
	release()
	require.ErrorIs(t, err, context.Canceled)
	n, err := tb.Get(bg, sku)
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the cancelled call moved nothing")
	got, ok, err := tb.Move(bg, db, sku, -1, 1, math.MaxInt64)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 4, got)
	require.True(t, tb.Prepared("move"), "prepared by the next call")
}
