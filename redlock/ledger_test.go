package redlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
)

// TestLedger runs the suite's ledger part on redlock over
// redisstore.WithLedger: the ledger is the store's, whatever the lock.
func TestLedger(t *testing.T) {
	c := testenv.Redis(t)
	clients := nodes(t)
	inventorytest.RunLedger(t, inventorytest.Config{
		NewManager: func(t *testing.T) inventory.StockManager {
			s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)), redisstore.WithLedger(0))
			require.NoError(t, err)
			m, err := redlock.New(clients, s, prefix(t, clients))
			require.NoError(t, err)
			return m
		},
	})
}
