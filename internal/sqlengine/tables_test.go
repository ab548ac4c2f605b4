package sqlengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/internal/testenv"
)

func tables(t *testing.T, db *sqlx.DB, ttl time.Duration) *sqlengine.Tables {
	t.Helper()
	return sqltest.Tables(t, db, sqlengine.Config{KeyTTL: ttl})
}

// TestDeadlock makes two transactions lock two rows in opposite orders; the
// one the server picks as victim must report ErrContention.
func TestDeadlock(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		if db.DriverName() == "sqlite" {
			t.Skip("SQLite has one write lock, no row locks: no deadlock to make (see TestBusy)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tb := tables(t, db, time.Hour)
		a, b := testenv.Prefix(), testenv.Prefix()
		require.NoError(t, tb.Init(ctx, a, 1))
		require.NoError(t, tb.Init(ctx, b, 1))
		errs := sqltest.Deadlock(t, ctx, db, tb, a, b)
		t.Logf("errors: %v", errs)
		victim := errs[0]
		if victim == nil {
			victim = errs[1]
		}
		require.Error(t, victim, "the server broke the deadlock")
		require.ErrorIs(t, victim, inventory.ErrContention)
	})
}

// TestBusy: SQLite's SQLITE_BUSY is contention.
func TestBusy(t *testing.T) {
	ctx := context.Background()
	db := testenv.SQLite(t)
	tb := tables(t, db, time.Hour)
	holder, err := db.BeginTxx(ctx, nil) // _txlock=immediate: holds the write lock
	require.NoError(t, err)
	defer holder.Rollback()
	conn, err := db.Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "PRAGMA busy_timeout = 50")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.Error(t, err)
	require.ErrorIs(t, tb.Err(ctx, "begin", err), inventory.ErrContention, "%v", err)
}

func TestPrune(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := context.Background()
		tb := tables(t, db, time.Millisecond)
		sku := testenv.Prefix()
		var entries []sqlengine.Entry
		for _, k := range []string{"a", "b", "c"} {
			entries = append(entries, sqlengine.Entry{Dir: driver.DirReduce, Key: k, Remaining: 1})
		}
		ok, err := tb.RecordAll(ctx, db, sku, entries)
		require.NoError(t, err)
		require.True(t, ok)
		time.Sleep(10 * time.Millisecond)
		es, err := tb.Entries(ctx, db, sku, []string{"a", "b", "c", "d"})
		require.NoError(t, err)
		require.Len(t, es, 3)
		for _, e := range es {
			require.True(t, e.Expired, "%+v", e)
		}
		tb.Tidy(ctx, 1) // not yet time to prune
		es, err = tb.Entries(ctx, db, sku, []string{"a", "b", "c"})
		require.NoError(t, err)
		require.Len(t, es, 3)
		tb.Tidy(ctx, 1000) // past the pruning interval
		es, err = tb.Entries(ctx, db, sku, []string{"a", "b", "c"})
		require.NoError(t, err)
		require.Empty(t, es, "pruned")

		ok, err = tb.RecordAll(ctx, db, sku, entries[:1])
		require.NoError(t, err)
		require.True(t, ok)
		time.Sleep(10 * time.Millisecond)
		n, err := tb.Prune(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	})
}

// TestPrecheckLeavesConnections: on SQLite, Prechecks take at most half the pool's
// connections (one of a pool of one; any number without a limit). While
// they are all taken, a Precheck skips its read, and the call goes on to
// its write: here a refusal and a duplicate the read would have reported
// come back as nil.
func TestPrecheckLeavesConnections(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		schema := sqldialect.Schema(sqltest.Schema(t, db))
		open := func() *sqlengine.Tables { // sizes the Prechecks' share of the pool at its first Precheck
			return sqltest.Tables(t, db, sqlengine.Config{Schema: schema})
		}
		tb := open()
		sku := testenv.Prefix()
		require.NoError(t, tb.Init(ctx, sku, 1))
		ok, err := tb.RecordAll(ctx, db, sku, []sqlengine.Entry{{Dir: driver.DirReduce, Key: "k", Remaining: 1}})
		require.NoError(t, err)
		require.True(t, ok)
		requireRead := func(tb *sqlengine.Tables, read bool) {
			t.Helper()
			_, refused := tb.Precheck(ctx, sku, 2, driver.DirReduce, "other")
			_, duplicate := tb.Precheck(ctx, sku, 1, driver.DirReduce, "k")
			if !read {
				require.NoError(t, refused, "skipped: no connection left for Prechecks")
				require.NoError(t, duplicate, "skipped: no connection left for Prechecks")
				return
			}
			require.ErrorIs(t, refused, inventory.ErrInsufficientStock)
			require.ErrorIs(t, duplicate, inventory.ErrDuplicate)
		}

		bounded := tb.Engine == sqldialect.SQLite // the other engines' Prechecks are not bounded
		n, release := tb.TakePrecheckConns()
		if bounded {
			require.Equal(t, db.Stats().MaxOpenConnections/2, n, "half the pool's connections")
		}
		requireRead(tb, !bounded)
		release()
		requireRead(tb, true)

		for _, limit := range []int{1, 0} {
			db.SetMaxOpenConns(limit)
			tb := open()
			n, release := tb.TakePrecheckConns()
			if bounded {
				require.Equal(t, limit, n, "a pool of %d connections (0: no limit)", limit)
			}
			requireRead(tb, !bounded || limit == 0)
			release()
			requireRead(tb, true)
		}
	})
}
