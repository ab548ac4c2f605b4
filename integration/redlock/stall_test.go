package redlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/redlock"
)

// stallClient is a node client as the package documentation advises: each
// call's ctx bounds its I/O, no retries of its own, a short dial timeout;
// the read timeout is go-redis's default, 3s.
func stallClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDeadlineUnderStalledNodes stops (SIGSTOP) lock nodes for 2.5s in the
// middle of a sale. Every call from 300ms before the stall to 300ms after it
// has a 1s deadline and must return within inventory.DeadlineSlack of it. With one node of three
// stopped the other two still sell; with two, calls fail, in time. After
// SIGCONT the keyed retries settle every failed call and the invariant holds
// exactly.
func TestDeadlineUnderStalledNodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stopped int
	}{{"one node", 1}, {"a majority", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := privateNodes(t)
			var clients []redis.UniversalClient
			for _, n := range nodes {
				clients = append(clients, stallClient(t, n.Addr()))
			}
			m, err := redlock.New(clients, privateStore(t), redlock.WithExpiry(faultExpiry))
			require.NoError(t, err)
			a := newAudit(m)
			d := &faulttest.Deadlined{StockManager: a, T: t, D: time.Second}
			sale := faulttest.Sale{Manager: d, SKU: "shoe", Stock: 400, Buyers: 300, Refund: 7, Workers: 16,
				CallTimeout: 2 * time.Second} // outside the stall; in it, Deadlined sets 1s
			start := time.Now()
			res := sale.Run(t, func() {
				t.Logf("stall %v into the sale", time.Since(start).Round(time.Millisecond))
				d.Stalled.Store(true) // check the calls in flight as the stall strikes, too
				time.Sleep(300 * time.Millisecond)
				for _, n := range nodes[:tc.stopped] {
					n.Pause()
				}
				a.Faulted.Store(true)
				time.Sleep(2500 * time.Millisecond)
				a.Faulted.Store(false)
				for _, n := range nodes[:tc.stopped] {
					n.Resume()
				}
				time.Sleep(300 * time.Millisecond)
				d.Stalled.Store(false)
			}, func() {
				t.Logf("every first attempt ended %v into the sale", time.Since(start).Round(time.Millisecond))
			})
			t.Log(d)
			t.Logf("%d units sold during the stall", a.During.Load())
			checked, _ := d.Report()
			require.Positive(t, checked, "calls ran during the stall")
			if tc.stopped == 1 {
				require.Positive(t, a.During.Load(), "the quorum kept selling")
			} else {
				require.Positive(t, res.Failed, "without a quorum calls fail")
			}
			require.Zero(t, res.Insufficient)
			a.Check(t)
		})
	}
}
