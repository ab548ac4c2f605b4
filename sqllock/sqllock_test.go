package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

var engines = []string{"mariadb", "postgres"}

// lapse ends the session that holds the advisory lock on name, as a lost
// connection does.
func lapse(t *testing.T, db *sqlx.DB, name string) {
	ctx := context.Background()
	var n int
	var err error
	if db.DriverName() == "mysql" {
		var id int64
		if err = db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(CONCAT('sqllock:', SHA1(?)))", name).Scan(&id); err == nil {
			_, err = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
			n = 1
		}
	} else {
		err = db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks,
			(SELECT hashtextextended('sqllock:' || $1::text, 0) AS k) AS h
			WHERE locktype = 'advisory' AND granted AND objsubid = 1
			AND classid::bigint = (k >> 32) & 4294967295 AND objid::bigint = k & 4294967295`, name).Scan(&n)
	}
	require.NoError(t, err, "lapse %q", name)
	require.Equal(t, 1, n, "sessions that held the lock on %q", name)
}

// TestLockerConformance runs the Locker suite, which proves exclusion
// across Lockers; a lapse kills the holder's database session.
func TestLockerConformance(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			// ByteExactNames holds 19 locks at once, each pinning a
			// connection, while another Locker waits for each: a
			// 16-connection pool would run dry.
			db := sqltest.Open(t, engine)
			db.SetMaxOpenConns(24)
			lockmgrtest.RunLocker(t, lockmgrtest.LockerConfig{
				NewLocker: func(t *testing.T) lockmgr.Locker {
					l, err := sqllock.NewLocker(db)
					require.NoError(t, err)
					return l
				},
				Lapse: func(t *testing.T, _ lockmgr.Locker, name string) { lapse(t, db, name) },
			})
		})
	}
}

func TestConformance(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			// The locks get a pool of their own, as the package doc
			// says: a held lock and each SKU's waiter pin a connection.
			locks, db := sqltest.Open(t, engine), sqltest.Open(t, engine)
			inventorytest.Run(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)))
					require.NoError(t, err)
					m, err := sqllock.New(locks, s)
					require.NoError(t, err)
					return m
				},
				RequireOrders: true,
			})
		})
	}
}

func TestOptionsRule(t *testing.T) {
	pg := sqltest.Open(t, "postgres")
	s, err := sqlstore.New(pg)
	require.NoError(t, err)
	optiontest.Run(t, map[string]sqllock.Option{
		"acquire timeout": sqllock.WithAcquireTimeout(time.Second),
	}, map[string]sqllock.Option{
		"zero acquire timeout":     sqllock.WithAcquireTimeout(0),
		"negative acquire timeout": sqllock.WithAcquireTimeout(-time.Second),
	},
		func(o sqllock.Option) (any, error) { return sqllock.New(pg, s, o) },
		func(o sqllock.Option) (any, error) { return sqllock.NewLocker(pg, o) },
	)
}

func TestNewRefusesBadConfig(t *testing.T) {
	pg := sqltest.Open(t, "postgres")
	for name, f := range map[string]func() error{
		"nil db":        func() error { _, err := sqllock.NewLocker(nil); return err },
		"nil store":     func() error { _, err := sqllock.New(pg, nil); return err },
		"sqlite driver": func() error { _, err := sqllock.NewLocker(sqlx.NewDb(pg.DB, "sqlite")); return err },
	} {
		if err := f(); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want one that wraps ErrInvalidArgument", name, err)
		}
	}
}

// TestAcquireTimeout: a lock held past the acquire timeout gives
// ErrContention, not a ctx error.
func TestAcquireTimeout(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			db := sqltest.Open(t, engine)
			l, err := sqllock.NewLocker(db, sqllock.WithAcquireTimeout(200*time.Millisecond))
			require.NoError(t, err)
			ctx := context.Background()
			name := fmt.Sprintf("timeout-%s-%d", engine, time.Now().UnixNano())
			le, err := l.Acquire(ctx, name)
			require.NoError(t, err)
			defer func() { require.NoError(t, le.Release(ctx)) }()
			_, err = l.Acquire(ctx, name)
			require.ErrorIs(t, err, inventory.ErrContention)
		})
	}
}

// TestOneWaiterPerProcess: however many callers of one process wait for a
// held lock, one of them waits in the database, on one connection, and the
// lock then passes from caller to caller.
func TestOneWaiterPerProcess(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			db := sqltest.Open(t, engine)
			db.SetMaxOpenConns(32)
			l, err := sqllock.NewLocker(db)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := fmt.Sprintf("crowd-%s-%d", engine, time.Now().UnixNano())
			held, err := l.Acquire(ctx, name)
			require.NoError(t, err)
			var wg sync.WaitGroup
			var holders, overlaps atomic.Int64
			for range 64 {
				wg.Go(func() {
					le, err := l.Acquire(ctx, name)
					if !assert.NoError(t, err) {
						return
					}
					if holders.Add(1) != 1 {
						overlaps.Add(1)
					}
					holders.Add(-1)
					assert.NoError(t, le.Release(ctx))
				})
			}
			time.Sleep(300 * time.Millisecond) // the crowd lines up
			open := db.Stats().OpenConnections
			require.NoError(t, held.Release(ctx))
			wg.Wait()
			require.LessOrEqual(t, open, 2, "connections while 64 callers waited for a held lock: the holder's and one waiter's")
			require.Zero(t, overlaps.Load())
		})
	}
}
