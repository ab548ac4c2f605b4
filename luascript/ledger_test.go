package luascript_test

import (
	"testing"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
)

// TestLedger runs the whole suite on a Manager that keeps every entry, on
// one Redis and on the Cluster: the ledger part (RequireLedger), and the
// rest, which the ledger must not change.
func TestLedger(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		c := testenv.Redis(t)
		inventorytest.Run(t, inventorytest.Config{
			NewManager:    func(t *testing.T) inventory.StockManager { return newManager(t, c, luascript.WithLedger(0)) },
			RequireOrders: true, RequireLedger: true,
		})
	})
	t.Run("cluster", func(t *testing.T) {
		c := testenv.RedisCluster(t)
		inventorytest.Run(t, inventorytest.Config{
			NewManager:    func(t *testing.T) inventory.StockManager { return newManager(t, c, luascript.WithLedger(0)) },
			RequireOrders: true, RequireLedger: true,
		})
	})
}
