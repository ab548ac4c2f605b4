package sqllock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/sqllock"
)

// TestOrders runs the public suite, orders required, with advisory locks
// on PostgreSQL over a redisstore on the Redis Cluster (a cart's lines on
// several masters). TestConformance runs the same order subtests over
// sqlstore on MariaDB and PostgreSQL; one more full run per store would
// take the package past go test's default timeout under -race. Run only
// the order subtests with -run 'TestOrders/Orders'.
func TestOrders(t *testing.T) {
	locks := sqltest.Open(t, "postgres")
	c := testenv.RedisCluster(t)
	inventorytest.Run(t, inventorytest.Config{
		NewManager: func(t *testing.T) inventory.StockManager {
			m, err := sqllock.New(locks, storetest.Redis(t, c))
			require.NoError(t, err)
			return m
		},
		RequireOrders: true,
	})
}
