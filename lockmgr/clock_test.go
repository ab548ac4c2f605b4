package lockmgr_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/clocktest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// TestHoldClock: the holds of a Manager expire on its store's clock, never
// the client's (clocktest.Run: the store's clock ten days behind, then
// ahead): redisstore on a private Redis whose clock is moved, sqlstore on
// MariaDB and PostgreSQL sessions whose clock is set. sqlstore on SQLite is
// in integration/clock.
func TestHoldClock(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		clocktest.Run(t, func(t *testing.T) clocktest.At {
			at := clocktest.RedisAt(t)
			return func(now time.Time) clocktest.Manager {
				st, err := redisstore.New(at(now))
				require.NoError(t, err)
				m, err := lockmgr.NewManager(newFakeLocker(0), st)
				require.NoError(t, err)
				return m
			}
		})
	})
	for _, e := range []struct {
		name string
		open func(testing.TB) (*sqlx.DB, func(time.Time) *sqlx.DB)
	}{{"mariadb", clocktest.MySQLAt}, {"postgres", clocktest.PostgresAt}} {
		t.Run(e.name, func(t *testing.T) {
			clocktest.Run(t, func(t *testing.T) clocktest.At {
				db, at := e.open(t)
				schema := sqltest.Schema(t, db)
				return func(now time.Time) clocktest.Manager {
					st, err := sqlstore.New(at(now), sqlstore.WithSchema(schema))
					require.NoError(t, err)
					m, err := lockmgr.NewManager(newFakeLocker(0), st)
					require.NoError(t, err)
					return m
				}
			})
		})
	}
}
