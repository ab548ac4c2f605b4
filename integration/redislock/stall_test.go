package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// stallDeadline is the deadline of every call of the stall tests.
const stallDeadline = time.Second

// stallClient is a client as README advises: each call's ctx bounds its
// I/O; everything else is go-redis's default (ReadTimeout 3s, 3 retries),
// so a call that waited for the client's own timeout would run 2s late.
func stallClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// stallSale sells while srv is stopped (SIGSTOP) for 2.5s: every call from
// 300ms before the stall to 300ms after it runs with a 1s deadline, and
// must return within inventory.DeadlineSlack of it though the server
// answers nothing. After SIGCONT the sale's keyed retries
// settle every failed call, and the invariant must hold exactly.
func stallSale(t *testing.T, m *redislock.Manager, srv *faulttest.Process, sku string) {
	d := &faulttest.Deadlined{StockManager: newAudit(m), T: t, D: stallDeadline}
	sale := faulttest.Sale{Manager: d, SKU: sku, Stock: 400, Buyers: 400, Refund: 7, Workers: 32,
		CallTimeout: 2 * time.Second} // outside the stall; in it, Deadlined sets 1s
	start := time.Now()
	res := sale.Run(t, func() {
		t.Logf("stall %v into the sale", time.Since(start).Round(time.Millisecond))
		d.Stalled.Store(true) // check the calls in flight as the stall strikes, too
		time.Sleep(300 * time.Millisecond)
		srv.Pause()
		time.Sleep(2500 * time.Millisecond)
		srv.Resume()
		time.Sleep(300 * time.Millisecond)
		d.Stalled.Store(false)
	}, func() {
		t.Logf("every first attempt ended %v into the sale", time.Since(start).Round(time.Millisecond))
	})
	t.Log(d)
	checked, _ := d.Report()
	require.Positive(t, checked, "calls ran during the stall")
	require.Positive(t, res.Failed, "the stall failed some calls")
	require.Zero(t, res.Insufficient, "a stall never reads as sold out")
	d.StockManager.(*itest.Audit).Check(t)
}

// TestDeadlineUnderStalledRedis stops the one Redis that holds both the
// locks and the stock in the middle of a sale.
func TestDeadlineUnderStalledRedis(t *testing.T) {
	srv := faulttest.StartRedis(t)
	c := stallClient(t, srv.Addr())
	s, err := redisstore.New(c)
	require.NoError(t, err)
	m, err := redislock.New(c, s, redislock.WithTTL(time.Second))
	require.NoError(t, err)
	stallSale(t, m, srv, "shoe")
}

// TestDeadlineUnderStalledLockRedis stops only the Redis of the locks; the
// stock lives on the shared Redis, which keeps answering, so the lateness
// measured is the lock's own.
func TestDeadlineUnderStalledLockRedis(t *testing.T) {
	srv := faulttest.StartRedis(t)
	shared := testenv.Redis(t)
	s, err := redisstore.New(stallClient(t, shared.Options().Addr), redisstore.WithPrefix(testenv.RedisPrefix(t, shared)))
	require.NoError(t, err)
	m, err := redislock.New(stallClient(t, srv.Addr()), s, redislock.WithTTL(time.Second))
	require.NoError(t, err)
	stallSale(t, m, srv, "shoe")
}
