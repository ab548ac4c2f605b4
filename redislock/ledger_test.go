package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// TestLedger runs the suite's ledger part on redislock over a store that
// keeps the movement ledger: sqlstore.WithLedger on every engine, and
// redisstore.WithLedger on one Redis and on the Cluster.
func TestLedger(t *testing.T) {
	t.Run("sql", func(t *testing.T) {
		sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
			schema := sqltest.Schema(t, db)
			c := testenv.Redis(t)
			inventorytest.RunLedger(t, inventorytest.Config{
				Timeout: 5 * time.Minute,
				NewManager: func(t *testing.T) inventory.StockManager {
					s, err := sqlstore.New(db, sqlstore.WithSchema(schema), sqlstore.WithLedger())
					require.NoError(t, err)
					require.NoError(t, s.CreateTables(context.Background()))
					return newManager(t, c, s, redislock.WithPrefix(lockPrefix(t, c)))
				},
			})
		})
	})
	for _, b := range []struct {
		name string
		open func(t *testing.T) redis.UniversalClient
	}{
		{"redis", func(t *testing.T) redis.UniversalClient { return testenv.Redis(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return testenv.RedisCluster(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			c := b.open(t)
			inventorytest.RunLedger(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)), redisstore.WithLedger(0))
					require.NoError(t, err)
					return newManager(t, c, s, redislock.WithPrefix(lockPrefix(t, c)))
				},
			})
		})
	}
}
