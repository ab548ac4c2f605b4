package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/redlock"
)

// TestLockerConformance runs the Locker suite, which proves exclusion
// across Lockers (as across processes): the compare-and-set of the
// StockManager suite hides a lock that does not exclude.
func TestLockerConformance(t *testing.T) {
	clients := nodes(t)
	var prefixes sync.Map // subtest -> lock key prefix, shared by its Lockers
	prefix := func(t *testing.T) string {
		p, loaded := prefixes.LoadOrStore(t.Name(), testenv.Prefix()+":")
		if !loaded {
			t.Cleanup(func() {
				for _, c := range clients {
					testenv.DeleteKeys(t, c, p.(string)+"*")
				}
			})
		}
		return p.(string)
	}
	lockmgrtest.RunLocker(t, lockmgrtest.LockerConfig{
		NewLocker: func(t *testing.T) lockmgr.Locker {
			// A short expiry, so that a lapse is seen soon.
			l, err := redlock.NewLocker(clients, redlock.WithPrefix(prefix(t)), redlock.WithExpiry(1500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		// Another holder's token replaces the lock on every node for a
		// moment, as when the lock expired while its holder was paused and
		// someone else took it: the next extension fails.
		Lapse: func(t *testing.T, _ lockmgr.Locker, name string) {
			for _, c := range clients {
				if err := c.Set(context.Background(), prefix(t)+name, "lapsed", 2*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}
