package sqllock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

// TestOrders runs the public suite, orders required, with advisory locks
// on MariaDB and PostgreSQL over each store: the same database, standalone
// Redis and the Redis Cluster (a cart's lines on several masters). Run only
// the order subtests with -run 'TestOrders/.*/Orders'.
func TestOrders(t *testing.T) {
	redisStore := func(c redis.UniversalClient) func(t *testing.T) lockmgr.Store {
		return func(t *testing.T) lockmgr.Store {
			s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)))
			require.NoError(t, err)
			return s
		}
	}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			locks, db := sqltest.Open(t, engine), sqltest.Open(t, engine)
			for name, open := range map[string]func(t *testing.T) lockmgr.Store{
				"sql": func(t *testing.T) lockmgr.Store {
					s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)))
					require.NoError(t, err)
					return s
				},
				"redis":   redisStore(testenv.Redis(t)),
				"cluster": redisStore(testenv.RedisCluster(t)),
			} {
				t.Run(name, func(t *testing.T) {
					inventorytest.Run(t, inventorytest.Config{
						NewManager: func(t *testing.T) inventory.StockManager {
							m, err := sqllock.New(locks, open(t))
							require.NoError(t, err)
							return m
						},
						RequireOrders: true,
					})
				})
			}
		})
	}
}
