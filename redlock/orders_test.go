package redlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redlock"
)

// TestOrders runs the public suite, orders required, with the Redlock
// quorum over a redisstore on the Redis Cluster (a cart's lines on several
// masters); TestConformance runs the order subtests over the other stores.
func TestOrders(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		clients := nodes(t)
		inventorytest.Run(t, inventorytest.Config{
			// A store per subtest: the suite's hold ids are not
			// kept apart between subtests.
			NewManager: func(t *testing.T) inventory.StockManager {
				m, err := redlock.New(clients, storetest.Redis(t, testenv.RedisCluster(t)), prefix(t, clients))
				require.NoError(t, err)
				return m
			},
			RequireOrders: true,
		})
	})
}
