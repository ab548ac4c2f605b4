package redlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/integration/internal/itest"
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
			res := itest.StallSale(t, a, 300, 16, func() {
				for _, n := range nodes[:tc.stopped] {
					n.Pause()
				}
			}, func() {
				for _, n := range nodes[:tc.stopped] {
					n.Resume()
				}
			})
			if tc.stopped == 1 {
				require.Positive(t, a.During.Load(), "the quorum kept selling")
			} else {
				require.Positive(t, res.Failed, "without a quorum calls fail")
			}
		})
	}
}
