package redisstore_test

import (
	"time"

	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/redisstore"
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

// TestHoldStoreConformance runs the lockmgrtest HoldStore suite on
// standalone Redis and the Redis Cluster.
func TestHoldStoreConformance(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		lockmgrtest.RunHoldStore(t, lockmgrtest.HoldStoreConfig{
			NewStore: func(t *testing.T) lockmgr.HoldStore {
				s, _ := newStore(t, c, redisstore.WithKeyTTL(time.Second))
				return s
			},
			KeyTTL: time.Second,
		})
	})
}
