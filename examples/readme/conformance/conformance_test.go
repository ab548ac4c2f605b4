package mystrategy_test

import (
	"testing"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
)

func TestConformance(t *testing.T) {
	inventorytest.Run(t, inventorytest.Config{
		NewManager: func(t *testing.T) inventory.StockManager {
			return inventorytest.NewMemory(0) // your strategy's constructor here
		},
	})
}
