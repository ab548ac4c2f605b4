package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
)

// faultExpiry is the lock expiry of the fault tests: a lock left on a node
// that missed its release (it was down) blocks that node for at most this
// long. Each node has 5% of it, 100ms, to answer an attempt to lock.
const faultExpiry = 2 * time.Second

// faultClient is a client as the package documentation advises (see
// itest.FaultClient): each node has 5% of faultExpiry to answer.
func faultClient(t *testing.T, addr string) *redis.Client {
	return itest.FaultClient(t, addr, 500*time.Millisecond)
}

// privateNodes starts three private Redis servers to serve as lock nodes.
func privateNodes(t *testing.T) []*faulttest.Process {
	return []*faulttest.Process{faulttest.StartRedis(t), faulttest.StartRedis(t), faulttest.StartRedis(t)}
}

// privateStore keeps the stock in a private Redis of its own, which no
// fault touches.
func privateStore(t *testing.T) redlock.Store {
	s, err := redisstore.New(faultClient(t, faulttest.StartRedis(t).Addr()))
	require.NoError(t, err)
	return s
}

// newAudit audits m under faults of the lock nodes (see itest.Audit).
func newAudit(m inventory.StockManager) *itest.Audit { return itest.NewAudit(m, hasCause) }

// hasCause reports whether err wraps a context error, or a node's or the
// network's error.
func hasCause(err error) bool {
	var rse *redsync.RedisError
	return itest.BackendCause(err) || errors.As(err, &rse)
}

// TestNodeFaultsMidSale breaks lock nodes, one at a time, in the middle of a
// sale: the quorum of the other two keeps selling, and the invariant holds
// exactly once every failed call was retried with its key.
func TestNodeFaultsMidSale(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults int // how many times the fault sells 10 units
		fault  func(nodes []*faulttest.Process, a *itest.Audit)
	}{
		// A crash (SIGKILL), a restart from the append-only file, then a
		// crash of another node: the restarted one must now be part of
		// the quorum.
		{"kill and restart", 2, func(nodes []*faulttest.Process, a *itest.Audit) {
			nodes[0].Kill()
			a.Sells(10)
			nodes[0].Start()
			nodes[1].Kill()
			a.Sells(10)
			nodes[1].Start()
		}},
		// SIGSTOP: the node's connections stay open and its answers stop.
		{"pause and resume", 1, func(nodes []*faulttest.Process, a *itest.Audit) {
			nodes[0].Pause()
			a.Sells(10)
			nodes[0].Resume()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := privateNodes(t)
			var clients []redis.UniversalClient
			for _, n := range nodes {
				clients = append(clients, faultClient(t, n.Addr()))
			}
			m, err := redlock.New(clients, privateStore(t), redlock.WithExpiry(faultExpiry))
			require.NoError(t, err)
			a := newAudit(m)
			sale := faulttest.Sale{Manager: a, SKU: "shoe", Stock: 400, Buyers: 300, Refund: 7, Workers: 8}
			res := sale.Run(t, func() { tc.fault(nodes, a) }, func() {})
			t.Logf("%d units sold while a node was down", a.During.Load())
			require.GreaterOrEqual(t, a.During.Load(), int64(10*tc.faults), "the quorum kept selling")
			require.Zero(t, res.Insufficient)
			a.Check(t)
		})
	}
}

// TestNetworkFaults puts a toxiproxy before one of the three lock nodes and
// runs a sale while the fault lasts: the other two nodes are a quorum, so
// the sale goes on. Then the fault clears and the sale ends on all three.
func TestNetworkFaults(t *testing.T) {
	nodes := privateNodes(t)
	store := privateStore(t)
	for _, tc := range []struct {
		name  string
		fault func(p *netfault.Proxy)
	}{
		{"latency", func(p *netfault.Proxy) { p.Latency(50 * time.Millisecond) }},
		{"latency past the node timeout", func(p *netfault.Proxy) { p.Latency(300 * time.Millisecond) }},
		{"blackhole", func(p *netfault.Proxy) { p.Blackhole() }},
		{"connection reset", func(p *netfault.Proxy) { p.ResetPeer(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netfault.NewProxy(t, nodes[0].Addr())
			clients := []redis.UniversalClient{faultClient(t, p.Addr()), faultClient(t, nodes[1].Addr()), faultClient(t, nodes[2].Addr())}
			m, err := redlock.New(clients, store, redlock.WithExpiry(faultExpiry), redlock.WithPrefix(testenv.Prefix()+":"))
			require.NoError(t, err)
			a := newAudit(m)
			sale := faulttest.Sale{Manager: a, SKU: testenv.Prefix(), Stock: 250, Buyers: 200, Refund: 5, Workers: 8}
			res := sale.Run(t, func() {
				tc.fault(p)
				a.Sells(10)
				p.Clear()
				p.Reconnect()
			}, func() {})
			t.Logf("%d units sold while one node was cut off", a.During.Load())
			require.GreaterOrEqual(t, a.During.Load(), int64(10), "the quorum kept selling")
			require.Zero(t, res.Insufficient)
			a.Check(t)
		})
	}
}

// TestPausedHolder stalls a holder between its checks and its write until
// its lock has lapsed and another Manager has sold the rest: the stalled
// holder's late write fails its compare-and-set, and its call, tried again
// under the lock, finds the stock sold out. Nothing is oversold.
//
// A stall of the whole process would stop the lock's extension too; here
// only the call stalls, so its Manager is cut off from the nodes (every
// connection through the proxies is reset) for the stall, and the lock
// expires on the nodes as it would.
func TestPausedHolder(t *testing.T) {
	for _, st := range itest.Stores {
		t.Run(st.Name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			store := st.Open(t)
			direct := nodes(t)
			var proxies []*netfault.Proxy
			var cut []redis.UniversalClient
			for _, c := range direct {
				p := netfault.NewProxy(t, c.(*redis.Client).Options().Addr)
				proxies = append(proxies, p)
				cut = append(cut, faultClient(t, p.Addr()))
			}
			pfx := prefix(t, direct)
			other, err := redlock.New(direct, store, pfx, redlock.WithExpiry(time.Second))
			require.NoError(t, err)
			itest.PausedHolder(t, ctx, store, "last {shoes}", func(ps lockmgr.Store) inventory.StockManager {
				stalled, err := redlock.New(cut, ps, pfx, redlock.WithExpiry(time.Second))
				require.NoError(t, err)
				return stalled
			}, other, func() {
				for _, p := range proxies {
					p.ResetPeer(0)
				}
			}, func() error {
				for _, p := range proxies {
					p.Clear()
					p.Reconnect()
				}
				return nil
			})
		})
	}
}
