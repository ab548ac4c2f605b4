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
	"github.com/stockkit/inventory/ledger"
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

// TestLedgerInTx: over sqlstore.InTx, the entries commit and roll back
// with the caller's transaction.
func TestLedgerInTx(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		c := testenv.Redis(t)
		s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)), sqlstore.WithLedger())
		require.NoError(t, err)
		require.NoError(t, s.CreateTables(context.Background()))
		prefix := lockPrefix(t, c)
		m := newManager(t, c, s, redislock.WithPrefix(prefix))
		sqltest.LedgerInTx(t, db, m, func(tx *sqlx.Tx) inventory.StockManager {
			return newManager(t, c, s.InTx(tx), redislock.WithPrefix(prefix))
		})
	})
}

// TestLedgerOff: over a store without its WithLedger, the Manager is no
// ledger.Reader that keeps one: Entries fails with ledger.ErrNotKept, after
// checking its arguments.
func TestLedgerOff(t *testing.T) {
	c := testenv.Redis(t)
	rs, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	ss, err := sqlstore.New(sqltest.Open(t, "sqlite"))
	require.NoError(t, err)
	for _, s := range []redislock.Store{rs, ss} {
		m := newManager(t, c, s, redislock.WithPrefix(lockPrefix(t, c)))
		_, err := m.Entries(context.Background(), "sku", 0, 1)
		require.ErrorIs(t, err, ledger.ErrNotKept)
		_, err = m.Entries(context.Background(), "sku", 0, 0)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
}
