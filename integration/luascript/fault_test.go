package luascript_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/luascript"
)

func faultManager(t *testing.T, addr string) *luascript.Manager {
	t.Helper()
	m, err := luascript.New(itest.FaultClient(t, addr, time.Second))
	require.NoError(t, err)
	return m
}

// TestRedisRestartMidSale kills Redis (SIGKILL) in the middle of a sale and
// starts it again from its append-only file.
func TestRedisRestartMidSale(t *testing.T) {
	srv := faulttest.StartRedis(t)
	m := faulttest.Sale{Manager: faultManager(t, srv.Addr()), SKU: "shoe", Stock: 300, Buyers: 1500, Refund: 7,
		CallTimeout: 500 * time.Millisecond}
	res := m.Run(t, func() {
		srv.Kill()
		// Longer than a call's budget: go-redis redials within a call, so a
		// shorter outage may fail no call at all.
		time.Sleep(time.Second)
		srv.Start()
	}, func() {})
	require.Positive(t, res.Failed, "the restart should have failed some calls")
}

// TestNetworkFaults runs a sale through toxiproxy under each fault.
func TestNetworkFaults(t *testing.T) {
	srv := faulttest.StartRedis(t)
	for _, tc := range itest.RedisFaults(300 * time.Millisecond) {
		t.Run(tc.Name, func(t *testing.T) {
			p := netfault.NewProxy(t, srv.Addr())
			sale := faulttest.Sale{Manager: faultManager(t, p.Addr()), SKU: t.Name(), Stock: 200, Buyers: 800, Refund: 5,
				CallTimeout: 200 * time.Millisecond}
			res := sale.Run(t, func() {
				tc.Fault(p)
				time.Sleep(400 * time.Millisecond)
			}, func() {
				p.Clear()
				p.Reconnect()
			})
			require.Positive(t, res.Failed, "the fault should have failed some calls")
			if tc.Unknown {
				require.Positive(t, res.FailedApplied, "some failed calls had been applied; their keyed retries must say ErrDuplicate")
			}
		})
	}
}

// TestErrorsUnderFaultAreWrapped checks what a caller sees while the network
// is down: the context's error or the network's, never a sentinel that
// claims to know the stock.
func TestErrorsUnderFaultAreWrapped(t *testing.T) {
	srv := faulttest.StartRedis(t)
	p := netfault.NewProxy(t, srv.Addr())
	m := faultManager(t, p.Addr())
	ctx := context.Background()
	require.NoError(t, m.Init(ctx, "shoe", 5))
	p.Blackhole()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := m.Reduce(cctx, "shoe", 1, inventory.WithKey("k"))
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || isTimeout(err), "got %v", err)
	for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate} {
		require.NotErrorIs(t, err, s)
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// TestClientResendAppliesOnce loses the reply to the script on a client
// that resends (default MaxRetries: 3). luascript's script calls are
// NoRetry, so go-redis does not send the call again: the caller gets the
// broken connection's error (the outcome unknown), the server applied the
// call once, and a keyed retry is safe.
func TestClientResendAppliesOnce(t *testing.T) {
	srv := faulttest.StartRedis(t)
	var cuts atomic.Int32 // replies to the script still to lose
	retrying := redis.NewClient(&redis.Options{Addr: srv.Addr(), MinRetryBackoff: time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &replyCutter{Conn: c, cuts: &cuts}, err
		}})
	t.Cleanup(func() { retrying.Close() })
	ctx := context.Background()
	m, err := luascript.New(retrying)
	require.NoError(t, err)
	// Load the script, so that the first reply cut is the move's, not NOSCRIPT's.
	require.NoError(t, m.Init(ctx, "shoe", 10))
	_, err = m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err)

	for i, keyed := range []bool{false, true} {
		require.NoError(t, m.Init(ctx, "shoe", 10))
		var opts []inventory.Option
		if keyed {
			opts = append(opts, inventory.WithKey(fmt.Sprint("buyer-", i)))
		}
		cuts.Store(2) // room for a resend, which must not come
		_, err := m.Reduce(ctx, "shoe", 1, opts...)
		require.Error(t, err, "keyed %v: the reply was lost, the outcome is unknown to the caller", keyed)
		require.EqualValues(t, 1, cuts.Load(), "keyed %v: the call was sent once", keyed)
		cuts.Store(0)
		got, err := m.Get(ctx, "shoe")
		require.NoError(t, err)
		require.EqualValues(t, 9, got, "keyed %v: the script ran once", keyed)
		if keyed {
			_, err = m.Reduce(ctx, "shoe", 1, opts...)
			require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry after an unknown outcome is safe")
		}
	}
}

// replyCutter closes the connection instead of passing on the reply to a
// script, while cuts is positive: the command reached the server and ran,
// its reply is lost.
type replyCutter struct {
	net.Conn
	cuts    *atomic.Int32
	cutNext atomic.Bool
}

func (c *replyCutter) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("eval")) && c.cuts.Add(-1) >= 0 {
		c.cutNext.Store(true)
	} else if c.cuts.Load() < 0 {
		c.cuts.Store(0)
	}
	return c.Conn.Write(b)
}

func (c *replyCutter) Read(b []byte) (int, error) {
	if c.cutNext.Load() {
		// The first byte of the reply shows that the server ran the
		// script (a fixed pause for it was too short on a loaded
		// machine); the reply is then lost.
		_, _ = c.Conn.Read(make([]byte, 1))
		c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// TestStalledRedis freezes a private Redis (SIGSTOP) in the middle of a
// keyed sale over a client with the documented settings
// (ContextTimeoutEnabled): every call must return within its 1s deadline
// plus inventory.DeadlineSlack; after SIGCONT the keyed retries settle every
// call and the sale's invariant holds.
func TestStalledRedis(t *testing.T) {
	srv := faulttest.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32, ContextTimeoutEnabled: true}) // MaxRetries: the default
	t.Cleanup(func() { c.Close() })
	m, err := luascript.New(c)
	require.NoError(t, err)
	checked := deadlineChecked{t: t, m: m, on: new(atomic.Bool), calls: new(atomic.Int64), worst: new(atomic.Int64)}
	sale := faulttest.Sale{Manager: checked, SKU: "shoe", Stock: 300, Buyers: 600, Refund: 5,
		CallTimeout: time.Second, Workers: 32}
	res := sale.Run(t, func() {
		checked.on.Store(true)
		srv.Pause()
		time.Sleep(1500 * time.Millisecond)
	}, func() {
		srv.Resume()
		checked.on.Store(false)
	})
	require.Positive(t, res.Failed, "the stall should have failed some calls")
	require.Positive(t, checked.calls.Load(), "calls were checked against their deadline")
	t.Logf("%d calls checked against their deadline during the stall; the worst returned %v past it beyond the scheduler's own delay",
		checked.calls.Load(), time.Duration(checked.worst.Load()).Round(time.Millisecond))
}

// deadlineChecked runs every call of m that starts while on is set under
// faulttest.CheckLate, with the deadline of the context it is given
// (CheckLate waits for the deadline, so calls outside the stall run plainly).
type deadlineChecked struct {
	t     *testing.T
	m     inventory.StockManager
	on    *atomic.Bool
	calls *atomic.Int64
	worst *atomic.Int64 // nanoseconds
}

func (d deadlineChecked) check(ctx context.Context, what string, call func(ctx context.Context) error) error {
	deadline, ok := ctx.Deadline()
	if !ok || !d.on.Load() {
		return call(ctx)
	}
	d.calls.Add(1)
	own, err := faulttest.CheckLate(d.t, what, time.Until(deadline), call)
	for w := d.worst.Load(); int64(own) > w && !d.worst.CompareAndSwap(w, int64(own)); w = d.worst.Load() {
	}
	return err
}

func (d deadlineChecked) Init(ctx context.Context, sku string, qty int64) error {
	return d.check(ctx, "init", func(ctx context.Context) error { return d.m.Init(ctx, sku, qty) })
}

func (d deadlineChecked) Get(ctx context.Context, sku string) (n int64, err error) {
	err = d.check(ctx, "get", func(ctx context.Context) error { n, err = d.m.Get(ctx, sku); return err })
	return n, err
}

func (d deadlineChecked) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (n int64, err error) {
	err = d.check(ctx, "reduce", func(ctx context.Context) error { n, err = d.m.Reduce(ctx, sku, qty, opts...); return err })
	return n, err
}

func (d deadlineChecked) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (n int64, err error) {
	err = d.check(ctx, "return", func(ctx context.Context) error { n, err = d.m.Return(ctx, sku, qty, opts...); return err })
	return n, err
}
