package zklock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/zklock"
)

// TestLockerConformance runs the Locker suite, which proves exclusion
// across Lockers (each with a session of its own, as separate processes):
// the compare-and-set of the StockManager suite hides a lock that does not
// exclude.
func TestLockerConformance(t *testing.T) {
	admin := testenv.ZooKeeper(t)
	addr := testenv.List(testenv.EnvZooKeeper, testenv.DefaultZooKeeper)[0]
	var (
		roots sync.Map // subtest -> lock root, shared by its Lockers
		conns sync.Map // Locker -> its session
	)
	lockmgrtest.RunLocker(t, lockmgrtest.LockerConfig{
		NewLocker: func(t *testing.T) lockmgr.Locker {
			r, loaded := roots.LoadOrStore(t.Name(), "")
			if !loaded {
				// Not root(t): a lapsed holder's empty directory may stay
				// behind, which the next caller of that SKU would remove.
				r = "/inventory-test/" + testenv.Prefix()
				roots.Store(t.Name(), r)
				t.Cleanup(func() {
					dirs, _, _ := admin.Children(r.(string))
					for _, d := range dirs {
						_ = admin.Delete(r.(string)+"/"+d, -1)
					}
					_ = admin.Delete(r.(string), -1)
				})
			}
			conn, events := session(t, addr)
			l, err := zklock.NewLocker(conn, zklock.WithRoot(r.(string)), zklock.WithSessionEvents(events))
			if err != nil {
				t.Fatal(err)
			}
			conns.Store(l, conn)
			return l
		},
		// The holder's session ends, and its node with it, as when the
		// session expired while the holder was cut off.
		Lapse: func(t *testing.T, l lockmgr.Locker, _ string) {
			c, _ := conns.Load(l)
			c.(*zk.Conn).Close()
		},
	})
}

// session connects to ZooKeeper at addr and waits for the session, closed
// when t ends.
func session(t *testing.T, addr string) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, events
			}
		case <-deadline:
			t.Fatalf("no session with ZooKeeper at %s within 10s", addr)
		}
	}
}
