package zklock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/zklock"
)

// TestOrders runs the public suite, orders required, with ZooKeeper locks
// over a redisstore on the Redis Cluster (a cart's lines on several
// masters); TestConformance runs the order subtests over the other stores.
func TestOrders(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		inventorytest.Run(t, inventorytest.Config{
			// A store, and so a Manager and a session, per subtest:
			// the suite's hold ids are not kept apart between
			// subtests.
			NewManager: func(t *testing.T) inventory.StockManager {
				l := connect(t)
				m, err := zklock.New(l.conn, storetest.Redis(t, testenv.RedisCluster(t)), zklock.WithRoot(root(t, l.conn)), zklock.WithSessionEvents(l.events))
				require.NoError(t, err)
				return m
			},
			RequireOrders: true,
		})
	})
}
