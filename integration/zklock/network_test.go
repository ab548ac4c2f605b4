//go:build !race

// TestNetworkFaults resets and blackholes the client's connections, which
// makes it reconnect while its watches are set, and so can trip a known
// data race inside go-zookeeper (lastZxid, read by sendSetWatches while
// recvLoop writes it: go-zookeeper/zk#35; it did, once, in a fresh clone
// on 2026-12-06, in the connection reset case): it runs only without the
// race detector (make test's second pass), as TestStall does.

package zklock_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/zklock"
)

// TestNetworkFaults runs networkFaults on a private ZooKeeper, the stock
// in a private Redis that no fault touches.
func TestNetworkFaults(t *testing.T) {
	networkFaults(t, faulttest.StartZooKeeper(t), privateStore(t))
}

// networkFaults runs a sale while a fault strikes the connection between
// the Manager's session and ZooKeeper, through toxiproxy, then clears.
// Every failed call is retried with its key; the invariant holds exactly, no
// call is refused for lack of stock, and no lock node is left behind.
func networkFaults(t *testing.T, srv *faulttest.Process, store zklock.Store) {
	for _, tc := range []struct {
		name  string
		fault func(p *netfault.Proxy, expired func() bool)
		// fails: the fault must fail some calls; expires: and end the
		// session.
		fails, expires bool
	}{
		// Slow, not dead: the session holds.
		{"latency", func(p *netfault.Proxy, _ func() bool) {
			p.Latency(100 * time.Millisecond)
			time.Sleep(time.Second)
		}, false, false},
		// The server stops answering, until the session has expired.
		{"blackhole until the session expires", func(p *netfault.Proxy, expired func() bool) {
			p.Blackhole()
			for deadline := time.Now().Add(time.Minute); !expired() && time.Now().Before(deadline); { // a bound for a broken run only
				time.Sleep(50 * time.Millisecond)
			}
		}, true, true},
		// Every connection is reset for a second.
		{"connection reset", func(p *netfault.Proxy, _ func() bool) {
			p.ResetPeer(0)
			time.Sleep(time.Second)
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netfault.NewProxy(t, srv.Addr())
			conn, events := session(t, p.Addr())
			watcher, _ := session(t, srv.Addr())
			r := "/inventory-test/" + testenv.Prefix()
			// The canary is an ephemeral node of the Manager's session:
			// it goes when the session expires.
			canary := "/canary-" + testenv.Prefix()
			_, err := conn.Create(canary, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			expired := func() bool { ok, _, err := watcher.Exists(canary); return err == nil && !ok }
			m, err := zklock.New(conn, store, zklock.WithRoot(r), zklock.WithSessionEvents(events))
			require.NoError(t, err)
			a := newAudit(m)
			sale := faulttest.Sale{Manager: a, SKU: testenv.Prefix(), Stock: 120, Buyers: 100, Refund: 5, Workers: 8}
			res := sale.Run(t, func() {
				tc.fault(p, expired)
				p.Clear()
			}, func() {})
			if tc.fails {
				require.Positive(t, res.Failed, "the fault should have failed some calls")
			}
			require.Zero(t, res.Insufficient)
			a.Check(t)
			if tc.expires {
				require.True(t, expired(), "the session expired")
			}
			t.Logf("the session expired: %v", expired())
			noOrphans(t, srv.Addr(), r)
		})
	}
}
