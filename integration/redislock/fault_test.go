package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// faultClient is a client for the fault tests (see itest.FaultClient).
func faultClient(t *testing.T, addr string) *redis.Client {
	return itest.FaultClient(t, addr, time.Second)
}

// faultManager locks and keeps stock in the Redis at c, with a 1s lock TTL
// so that a lock whose holder lost its connection frees up soon.
func faultManager(t *testing.T, c redis.UniversalClient, wrap func(redislock.Store) redislock.Store) *redislock.Manager {
	t.Helper()
	s, err := redisstore.New(c)
	require.NoError(t, err)
	var store redislock.Store = s
	if wrap != nil {
		store = wrap(s)
	}
	m, err := redislock.New(c, store, redislock.WithTTL(time.Second))
	require.NoError(t, err)
	return m
}

// newAudit audits m under faults of Redis (see itest.Audit).
func newAudit(m inventory.StockManager) *itest.Audit { return itest.NewAudit(m, hasCause) }

// hasCause reports whether err wraps a context, network or Redis error.
func hasCause(err error) bool { return itest.BackendCause(err) }

// TestRedisRestartMidSale kills Redis (SIGKILL) in the middle of a sale and
// starts it again from its append-only file. Locks and stock live in the
// same Redis: locks held at the kill come back with their TTL.
func TestRedisRestartMidSale(t *testing.T) {
	srv := faulttest.StartRedis(t)
	m := newAudit(faultManager(t, faultClient(t, srv.Addr()), nil))
	sale := faulttest.Sale{Manager: m, SKU: "shoe", Stock: 300, Buyers: 1200, Refund: 7, Workers: 32,
		CallTimeout: 500 * time.Millisecond}
	res := sale.Run(t, func() {
		srv.Kill()
		time.Sleep(time.Second)
		srv.Start()
	}, func() {})
	require.Positive(t, res.Failed, "the restart should have failed some calls")
	m.InsufficientAllowed = true
	m.Check(t)
}

// strikeStore runs a fault, once armed, just before the next write is sent:
// the moment at which only the idempotency key can tell whether the write
// took effect. A lock serialises the writes of one SKU, so a fault striking
// at a random moment rarely catches one in flight.
type strikeStore struct {
	redislock.Store
	strike atomic.Pointer[func()]
}

func (s *strikeStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	if f := s.strike.Swap(nil); f != nil {
		(*f)()
	}
	return s.Store.CompareAndSet(ctx, sku, version, newStock, dir, key)
}

// TestNetworkFaults runs a sale through toxiproxy under each fault, between
// the Manager's client (locks and stock) and its Redis. The fault strikes
// as a write is sent and lasts until every buyer has tried once; then every
// failed call is retried with its key. The stock never runs out, so no call
// may say ErrInsufficientStock.
func TestNetworkFaults(t *testing.T) {
	srv := faulttest.StartRedis(t)
	for _, tc := range itest.RedisFaults(400 * time.Millisecond) {
		t.Run(tc.Name, func(t *testing.T) {
			p := netfault.NewProxy(t, srv.Addr())
			var ss *strikeStore
			m := newAudit(faultManager(t, faultClient(t, p.Addr()), func(s redislock.Store) redislock.Store {
				ss = &strikeStore{Store: s}
				return ss
			}))
			sale := faulttest.Sale{Manager: m, SKU: t.Name(), Stock: 500, Buyers: 400, Refund: 5,
				CallTimeout: 250 * time.Millisecond, Workers: 32}
			res := sale.Run(t, func() {
				struck := make(chan struct{})
				f := func() { tc.Fault(p); close(struck) }
				ss.strike.Store(&f)
				select {
				case <-struck:
				case <-time.After(10 * time.Second):
					t.Error("no write to strike")
				}
				time.Sleep(300 * time.Millisecond)
			}, func() {
				p.Clear()
				p.Reconnect()
			})
			require.Positive(t, res.Failed, "the fault should have failed some calls")
			require.Zero(t, res.Insufficient, "a fault never reads as sold out")
			if tc.Unknown {
				require.Positive(t, res.FailedApplied, "some failed calls had been applied; their keyed retries must say ErrDuplicate")
			}
			m.Check(t)
		})
	}
}

// TestErrorsUnderFaultAreWrapped checks what a caller sees while the
// network is down, with the lock free and with the lock held elsewhere: the
// context's error, the network's, or ErrContention, never a sentinel that
// claims to know the stock.
func TestErrorsUnderFaultAreWrapped(t *testing.T) {
	ctx := context.Background()
	srv := faulttest.StartRedis(t)
	for _, tc := range []struct {
		name  string
		fault func(p *netfault.Proxy)
	}{
		{"blackhole", func(p *netfault.Proxy) { p.Blackhole() }},
		{"connection reset", func(p *netfault.Proxy) { p.ResetPeer(0) }},
		{"cut mid-reply", func(p *netfault.Proxy) { p.CutAfterBytes(3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netfault.NewProxy(t, srv.Addr())
			m := faultManager(t, faultClient(t, p.Addr()), nil)
			sku := t.Name()
			require.NoError(t, m.Init(ctx, sku, 5))
			tc.fault(p)
			for _, call := range []func(context.Context) error{
				func(ctx context.Context) error { _, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k")); return err },
				func(ctx context.Context) error { _, err := m.Return(ctx, sku, 1); return err },
				func(ctx context.Context) error { _, err := m.Get(ctx, sku); return err },
			} {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				err := call(cctx)
				cancel()
				require.Error(t, err)
				require.True(t, hasCause(err), "got %v", err)
				for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate, inventory.ErrInvalidArgument} {
					require.NotErrorIs(t, err, s)
				}
			}
			p.Clear()
			p.Reconnect()
			n, err := m.Get(ctx, sku)
			require.NoError(t, err)
			require.EqualValues(t, 5, n, "nothing taken")
		})
	}
}

// TestDeadlineHonouredUnderBlackhole: a call returns at its deadline though
// the network stalls its clean-up. The client would wait 10s for a reply,
// and freeing the lock may take 5s, so a call that waited for either would
// run seconds late.
func TestDeadlineHonouredUnderBlackhole(t *testing.T) {
	ctx := context.Background()
	srv := faulttest.StartRedis(t)
	p := netfault.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	var ss *strikeStore
	m := faultManager(t, c, func(s redislock.Store) redislock.Store {
		ss = &strikeStore{Store: s}
		return ss
	})
	require.NoError(t, m.Init(ctx, "shoe", 5))
	f := p.Blackhole
	ss.strike.Store(&f)
	for _, stage := range []string{"write", "lock"} { // the write, then the next call's lock
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		_, err := m.Reduce(cctx, "shoe", 1, inventory.WithKey(stage))
		cancel()
		took := time.Since(start)
		t.Logf("%s blackholed: returned after %v: %v", stage, took, err)
		require.True(t, hasCause(err), "got %v", err)
		require.Less(t, took, 3*time.Second, "the call waited on the stalled network past its deadline")
	}
	p.Clear()
	p.Reconnect()
}
