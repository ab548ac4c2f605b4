// Package clock_test checks that holds on SQLite expire on the database's
// clock, never the client's (clocktest.Run), for the SQL order code
// (optimistic, rowlock) and sqlstore under lockmgr. The library reads
// SQLite's clock as julianday('now'); this test binary overrides julianday
// with an application function of modernc.org/sqlite (which the root module
// does not require, hence this directory), so that the database's clock
// reads what the test sets. The MariaDB and PostgreSQL runs live beside
// each package's tests (TestHoldClock).
package clock_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/stockkit/inventory/internal/clocktest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// fake is what julianday('now') reads in this process: nil for the real
// clock.
var fake atomic.Pointer[time.Time]

// unixEpochJD is the Julian day number of 1970-01-01T00:00:00Z.
const unixEpochJD = 2440587.5

func TestMain(m *testing.M) {
	// Every connection opened from now on gets this julianday, which
	// takes the place of SQLite's own; the library calls only
	// julianday('now').
	sqlite.MustRegisterScalarFunction("julianday", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if s, ok := args[0].(string); !ok || s != "now" {
			return nil, fmt.Errorf("clock test: julianday(%v): only julianday('now') is overridden", args[0])
		}
		now := time.Now()
		if at := fake.Load(); at != nil {
			now = *at
		}
		return unixEpochJD + float64(now.UnixMicro())/86400e6, nil
	})
	os.Exit(m.Run())
}

// sqliteAt returns a SQLite database of t's own with the tables of a
// schema, and a function that sets the database's clock, checks it, and
// returns the database.
func sqliteAt(t *testing.T) (sqlstore.Schema, func(at time.Time) *sqlx.DB) {
	db := testenv.SQLite(t)
	schema := sqltest.Schema(t, db)
	t.Cleanup(func() { fake.Store(nil) })
	return schema, func(at time.Time) *sqlx.DB {
		fake.Store(&at)
		var us int64
		require.NoError(t, db.Get(&us, `SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)`))
		// Within a millisecond: julianday is a double.
		require.InDelta(t, at.UnixMicro(), us, 1000, "the SQLite clock was not set: it reads %v, not %v", time.UnixMicro(us).UTC(), at.UTC())
		return db
	}
}

func TestHoldClock(t *testing.T) {
	managers := []struct {
		name string
		new  func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) clocktest.Manager
	}{
		{"optimistic", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) clocktest.Manager {
			m, err := optimistic.New(db, optimistic.WithSchema(schema))
			require.NoError(t, err)
			return m
		}},
		{"optimistic-single", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) clocktest.Manager {
			m, err := optimistic.New(db, optimistic.WithSchema(schema), optimistic.WithSingleStatement())
			require.NoError(t, err)
			return m
		}},
		{"rowlock", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) clocktest.Manager {
			m, err := rowlock.New(db, rowlock.WithSchema(schema))
			require.NoError(t, err)
			return m
		}},
		{"sqlstore", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) clocktest.Manager {
			st, err := sqlstore.New(db, sqlstore.WithSchema(schema))
			require.NoError(t, err)
			m, err := lockmgr.NewManager(&locker{names: map[string]*sync.Mutex{}}, st)
			require.NoError(t, err)
			return m
		}},
	}
	for _, mk := range managers {
		t.Run(mk.name, func(t *testing.T) {
			clocktest.Run(t, func(t *testing.T) clocktest.At {
				schema, at := sqliteAt(t)
				return func(now time.Time) clocktest.Manager { return mk.new(t, at(now), schema) }
			})
		})
	}
}

// locker is a lockmgr.Locker for calls made one at a time: a mutex per
// name in this process.
type locker struct {
	mu    sync.Mutex
	names map[string]*sync.Mutex
}

type lease struct{ mu *sync.Mutex }

func (l *locker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	m := l.names[name]
	if m == nil {
		m = new(sync.Mutex)
		l.names[name] = m
	}
	l.mu.Unlock()
	m.Lock()
	return lease{m}, nil
}

// Lost is never closed: the lock is this process's own.
func (lease) Lost() <-chan struct{} { return nil }

func (le lease) Release(context.Context) error {
	le.mu.Unlock()
	return nil
}
