package zklock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/zklock"
)

// sessionTimeout is the session timeout of the fault tests: a session cut
// off from ZooKeeper expires, and its lock nodes go, this long after its
// last word to the server. The private ZooKeeper allows it (the shared one
// would stretch it to its minimum).
const sessionTimeout = 2 * time.Second

// session opens a session to the ZooKeeper at addr and waits until it is
// established.
func session(t *testing.T, addr string) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	deadline := time.After(time.Minute) // a bound for a broken run only
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, events
			}
		case <-deadline:
			t.Fatalf("no session with ZooKeeper at %s within a minute", addr)
		}
	}
}

// newSession waits until conn has a session other than old.
func newSession(conn *zk.Conn, old int64) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // a bound for a broken run only
		if conn.State() == zk.StateHasSession && conn.SessionID() != old {
			return nil
		}
	}
	return errors.New("no new session within a minute")
}

// privateStore keeps the stock in a private Redis of its own, which no
// fault touches.
func privateStore(t *testing.T) zklock.Store {
	c := redis.NewClient(&redis.Options{Addr: faulttest.StartRedis(t).Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c)
	require.NoError(t, err)
	return s
}

// lockNodes lists the lock nodes left under root, the lock directories of
// every SKU.
func lockNodes(t *testing.T, conn *zk.Conn, root string) []string {
	t.Helper()
	dirs, _, err := conn.Children(root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	require.NoError(t, err)
	var left []string
	for _, d := range dirs {
		nodes, _, err := conn.Children(root + "/" + d)
		if !errors.Is(err, zk.ErrNoNode) {
			require.NoError(t, err)
		}
		for _, n := range nodes {
			left = append(left, d+"/"+n)
		}
	}
	return left
}

// noOrphans checks, over a session of its own, that no lock node is left
// under root once every call has ended (those of an expired session go
// when the server expires it, which a loaded machine delays: they have a
// minute), then deletes root.
func noOrphans(t *testing.T, addr, root string) {
	t.Helper()
	conn, _ := session(t, addr)
	var left []string
	require.Eventually(t, func() bool { left = lockNodes(t, conn, root); return len(left) == 0 },
		time.Minute, 50*time.Millisecond, "lock nodes left behind: %v", left)
	removeAll(conn, root)
}

// newAudit audits m under faults of ZooKeeper (see itest.Audit).
func newAudit(m inventory.StockManager) *itest.Audit { return itest.NewAudit(m, hasCause) }

// hasCause reports whether err wraps a context error, or ZooKeeper's, the
// network's or Redis's error.
func hasCause(err error) bool {
	for _, cause := range []error{zk.ErrConnectionClosed, zk.ErrNoServer, zk.ErrSessionExpired, zk.ErrSessionMoved, zk.ErrClosing, zk.ErrNoNode} {
		if errors.Is(err, cause) {
			return true
		}
	}
	return itest.BackendCause(err)
}

// TestFaults breaks ZooKeeper under a Manager in the middle of a sale, and
// stalls a lock holder until its session expires. One private ZooKeeper
// serves the subtests; the stock lives in a private Redis that no fault
// touches. The network faults run in TestNetworkFaults, without the race
// detector (network_test.go).
func TestFaults(t *testing.T) {
	srv := faulttest.StartZooKeeper(t)
	store := privateStore(t)
	t.Run("restart mid-sale", func(t *testing.T) { restartMidSale(t, srv, store) })
	t.Run("paused holder", func(t *testing.T) { pausedHolder(t, srv) })
}

// restartMidSale kills ZooKeeper (SIGKILL) in the middle of a sale and
// starts it again: once with the client back at once (the restored session
// lives on, with its nodes, unless the client took longer than its
// timeout), once with the client held off through a proxy until the
// restored session expired and its nodes went. Every failed call is retried with its
// key; the invariant holds exactly and no lock node is left behind.
func restartMidSale(t *testing.T, srv *faulttest.Process, store zklock.Store) {
	for _, tc := range []struct {
		name   string
		expire bool
	}{
		{"quick restart", false},
		{"session expires", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netfault.NewProxy(t, srv.Addr())
			conn, events := session(t, p.Addr())
			r := "/inventory-test/" + testenv.Prefix()
			m, err := zklock.New(conn, store, zklock.WithRoot(r), zklock.WithSessionEvents(events))
			require.NoError(t, err)
			a := newAudit(m)
			sid := conn.SessionID()
			// The canary is an ephemeral node of the Manager's session: it
			// goes when the server expires the session, which a watcher of
			// its own, straight to the server, sees.
			canary := "/canary-" + testenv.Prefix()
			if tc.expire {
				_, err := conn.Create(canary, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				require.NoError(t, err)
			}
			watcher, _ := session(t, srv.Addr())
			sale := faulttest.Sale{Manager: a, SKU: testenv.Prefix(), Stock: 200, Buyers: 150, Refund: 7, Workers: 8}
			res := sale.Run(t, func() {
				srv.Kill()
				if tc.expire {
					p.ResetPeer(0) // nothing of the client's reaches the server
				}
				time.Sleep(500 * time.Millisecond)
				srv.Start()
				if tc.expire {
					// Held off until the restored session expired: a fixed
					// session timeout and a second was not always enough
					// for a restarted server on a loaded machine.
					for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) { // a bound for a broken run only
						if ok, _, err := watcher.Exists(canary); err == nil && !ok {
							break
						}
						if time.Now().After(deadline) {
							t.Error("the session did not expire within a minute of the restart")
							break
						}
					}
					p.Clear()
				}
			}, func() {})
			require.Positive(t, res.Failed, "the restart should have failed some calls")
			require.Zero(t, res.Insufficient)
			a.Check(t)
			if tc.expire {
				require.NotEqual(t, sid, conn.SessionID(), "the session expired")
			}
			t.Logf("the session survived: %v", sid == conn.SessionID())
			noOrphans(t, srv.Addr(), r)
		})
	}
}

// pausedHolder stalls a holder between its checks and its write while its
// session is cut off from ZooKeeper until it expires, and another Manager,
// on a session of its own, sells the rest: the stalled holder's late write
// fails its compare-and-set, and its call, tried again under the lock on a
// new session, finds the stock sold out. Nothing is oversold. It runs over
// both stores: a value compare-and-set (Redis) and a version one (SQL).
func pausedHolder(t *testing.T, srv *faulttest.Process) {
	for _, st := range itest.Stores {
		t.Run(st.Name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			store := st.Open(t)
			p := netfault.NewProxy(t, srv.Addr())
			connA, eventsA := session(t, p.Addr())
			connB, _ := session(t, srv.Addr())
			r := root(t, connB)
			sid := connA.SessionID()

			other, err := zklock.New(connB, store, zklock.WithRoot(r))
			require.NoError(t, err)
			itest.PausedHolder(t, ctx, store, "last shoes", func(ps lockmgr.Store) inventory.StockManager {
				stalled, err := zklock.New(connA, ps, zklock.WithRoot(r), zklock.WithSessionEvents(eventsA))
				require.NoError(t, err)
				return stalled
			}, other, func() {
				p.ResetPeer(0) // nothing of the session's reaches the server: it expires
				p.Reconnect()
			}, func() error {
				p.Clear()
				return newSession(connA, sid)
			})
		})
	}
}
