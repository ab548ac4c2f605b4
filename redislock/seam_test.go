package redislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/redislock"
)

// TestLockerConformance runs the Locker suite, which proves exclusion
// across Lockers (as across processes): the compare-and-set of the
// StockManager suite hides a lock that does not exclude.
func TestLockerConformance(t *testing.T) {
	for name, client := range map[string]func(testing.TB) redis.UniversalClient{
		"redis":   func(t testing.TB) redis.UniversalClient { return testenv.Redis(t) },
		"cluster": func(t testing.TB) redis.UniversalClient { return testenv.RedisCluster(t) },
	} {
		t.Run(name, func(t *testing.T) {
			c := client(t)
			var prefixes sync.Map // subtest -> lock key prefix, shared by its Lockers
			lockmgrtest.RunLocker(t, lockmgrtest.LockerConfig{
				NewLocker: func(t *testing.T) lockmgr.Locker {
					p, loaded := prefixes.LoadOrStore(t.Name(), "")
					if !loaded {
						p = testenv.RedisPrefix(t, c)
						prefixes.Store(t.Name(), p)
					}
					// A short TTL, so that a lapse is seen soon.
					l, err := redislock.NewLocker(c, redislock.WithPrefix(p.(string)), redislock.WithTTL(1500*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					return l
				},
				// The lock key goes, as when its TTL ran out while the
				// holder was paused: renewal then finds it gone.
				Lapse: func(t *testing.T, _ lockmgr.Locker, name string) {
					p, _ := prefixes.Load(t.Name())
					if err := c.Del(context.Background(), redislock.LockKey(p.(string), name)).Err(); err != nil {
						t.Fatal(err)
					}
				},
			})
		})
	}
}
