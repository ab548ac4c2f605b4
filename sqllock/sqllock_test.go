package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

var engines = []string{"mariadb", "postgres"}

func hash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// lapse ends the session that holds the advisory lock on name, as a lost
// connection does.
func lapse(t *testing.T, db *sqlx.DB, name string) {
	ctx := context.Background()
	var err error
	if db.DriverName() == "mysql" {
		var id int64
		if err = db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", fmt.Sprintf("sqllock:%016x", hash(name))).Scan(&id); err == nil {
			_, err = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
		}
	} else {
		k := hash(name)
		var n int
		err = db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid::bigint = $1 AND objid::bigint = $2`,
			int64(k>>32), int64(uint32(k))).Scan(&n)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d sessions held the lock", n)
		}
	}
	require.NoError(t, err, "lapse %q", name)
}

// TestLockerConformance runs the Locker suite, which proves exclusion
// across Lockers; a lapse kills the holder's database session.
func TestLockerConformance(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			// ByteExactNames holds 19 locks at once, each pinning a
			// connection: a 16-connection pool would run dry.
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
			// The locks get a pool of their own: on a shared pool the
			// flash sale's 2000 waiters, each borrowing a connection per
			// try, starve the holder's store calls (17 calls/s seen).
			locks, db := sqltest.Open(t, engine), sqltest.Open(t, engine)
			inventorytest.Run(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)))
					require.NoError(t, err)
					m, err := sqllock.New(locks, s)
					require.NoError(t, err)
					return m
				},
			})
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	pg := sqltest.Open(t, "postgres")
	s, err := sqlstore.New(pg)
	require.NoError(t, err)
	for name, f := range map[string]func() error{
		"nil db":          func() error { _, err := sqllock.NewLocker(nil); return err },
		"nil store":       func() error { _, err := sqllock.New(pg, nil); return err },
		"sqlite driver":   func() error { _, err := sqllock.NewLocker(sqlx.NewDb(pg.DB, "sqlite")); return err },
		"zero timeout":    func() error { _, err := sqllock.New(pg, s, sqllock.WithAcquireTimeout(0)); return err },
		"negative timout": func() error { _, err := sqllock.NewLocker(pg, sqllock.WithAcquireTimeout(-time.Second)); return err },
	} {
		if err := f(); !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want one that wraps ErrInvalidArgument", name, err)
		}
	}
	_, err = sqllock.NewLocker(pg, nil, sqllock.WithAcquireTimeout(time.Second))
	require.NoError(t, err, "a nil option is ignored")
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
