package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
)

// TestStoreConformance runs the lockmgrtest Store suite on standalone Redis
// and the Redis Cluster.
func TestStoreConformance(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		lockmgrtest.RunStore(t, lockmgrtest.StoreConfig{
			NewStore: func(t *testing.T) lockmgr.Store { s, _ := newStore(t, c); return s },
		})
	})
}
