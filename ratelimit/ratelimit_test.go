package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/fakeorders"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/ratelimit"
)

// counting counts the calls that reach the wrapped manager: a refused call
// must not be one of them.
type counting struct {
	*inventorytest.Memory
	calls atomic.Int64
}

func (c *counting) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	c.calls.Add(1)
	return c.Memory.Reduce(ctx, sku, qty, opts...)
}

func (c *counting) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	c.calls.Add(1)
	return c.Memory.Return(ctx, sku, qty, opts...)
}

// clock is a manual clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(m inventory.StockManager) *clock {
	c := &clock{now: time.Unix(1_000_000, 0)}
	ratelimit.SetClock(m, c.Now)
	return c
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func wrap(t *testing.T, m inventory.StockManager, opts ...ratelimit.Option) inventory.StockManager {
	w, err := ratelimit.Wrap(m, opts...)
	require.NoError(t, err)
	return w
}

func TestPerSKU(t *testing.T) {
	ctx := context.Background()
	inner := &counting{Memory: inventorytest.NewMemory(0)}
	m := wrap(t, inner, ratelimit.WithPerSKU(10, 3))
	clk := newClock(m)
	require.NoError(t, m.Init(ctx, "hot", 100))
	require.NoError(t, m.Init(ctx, "cold", 100))

	for i := range 3 {
		_, err := m.Reduce(ctx, "hot", 1)
		require.NoError(t, err, "call %d is within the burst", i)
	}
	left, err := m.Reduce(ctx, "hot", 1)
	require.ErrorIs(t, err, inventory.ErrContention)
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	assert.Contains(t, err.Error(), "rate limited")
	assert.Contains(t, err.Error(), `"hot"`)
	assert.Contains(t, err.Error(), "per-SKU")
	assert.Zero(t, left)
	assert.EqualValues(t, 3, inner.calls.Load(), "the refused call did no I/O")
	n, err := m.Get(ctx, "hot")
	require.NoError(t, err)
	assert.EqualValues(t, 97, n, "the refused call changed nothing; Get is never limited")

	_, err = m.Return(ctx, "cold", 1)
	require.NoError(t, err, "another SKU has its own bucket")
	_, err = m.Return(ctx, "hot", 1)
	require.ErrorIs(t, err, ratelimit.ErrLimited, "Return takes from the same bucket")

	clk.Advance(100 * time.Millisecond) // one token at 10/s
	_, err = m.Reduce(ctx, "hot", 1)
	require.NoError(t, err)
	_, err = m.Reduce(ctx, "hot", 1)
	require.ErrorIs(t, err, ratelimit.ErrLimited)

	// Bad arguments take no token and are refused by the manager.
	for range 5 {
		_, err = m.Reduce(ctx, "cold", 0)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
	for range 2 {
		_, err = m.Reduce(ctx, "cold", 1)
		require.NoError(t, err, "the bad calls took none of cold's tokens")
	}
	for range 10 {
		require.NoError(t, m.Init(ctx, "hot", 100), "Init is never limited")
	}
}

func TestGlobal(t *testing.T) {
	ctx := context.Background()
	inner := &counting{Memory: inventorytest.NewMemory(0)}
	m := wrap(t, inner, ratelimit.WithGlobal(2, 2), ratelimit.WithPerSKU(1, 1))
	clk := newClock(m)
	for _, sku := range []string{"a", "b", "c", "d"} {
		require.NoError(t, m.Init(ctx, sku, 10))
	}
	_, err := m.Reduce(ctx, "a", 1)
	require.NoError(t, err)
	_, err = m.Reduce(ctx, "a", 1)
	require.ErrorContains(t, err, "per-SKU", "a's own bucket is empty")
	_, err = m.Reduce(ctx, "b", 1)
	require.NoError(t, err, "the per-SKU refusal of a took no global token")
	_, err = m.Reduce(ctx, "c", 1)
	require.ErrorIs(t, err, inventory.ErrContention)
	require.ErrorContains(t, err, "global")
	assert.EqualValues(t, 2, inner.calls.Load())

	clk.Advance(time.Second) // two global tokens, one per SKU
	_, err = m.Reduce(ctx, "c", 1)
	require.NoError(t, err, "the global refusal of c took none of c's tokens")
	_, err = m.Reduce(ctx, "d", 1)
	require.NoError(t, err)
}

func TestOrders(t *testing.T) {
	ctx := context.Background()
	// Memory has the order calls; a struct that embeds only its
	// StockManager has not.
	stockOnly := struct{ inventory.StockManager }{inventorytest.NewMemory(0)}
	_, ok := wrap(t, stockOnly).(inventory.OrderManager)
	assert.False(t, ok, "a manager without orders stays without")
	_, ok = wrap(t, inventorytest.NewMemory(0)).(inventory.OrderManager)
	assert.True(t, ok, "a manager with orders keeps them")

	inner := fakeorders.New(nil)
	m := wrap(t, inner, ratelimit.WithGlobal(rate.Inf, 1), ratelimit.WithPerSKU(1, 2))
	newClock(m)
	om, ok := m.(inventory.OrderManager)
	require.True(t, ok, "the wrapper keeps the order calls visible")
	for _, sku := range []string{"a", "b"} {
		require.NoError(t, m.Init(ctx, sku, 10))
	}
	_, err := m.Reduce(ctx, "b", 1) // b: one token left
	require.NoError(t, err)
	ab := []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}}
	require.NoError(t, om.ReduceLines(ctx, ab)) // a: 1 left, b: 0
	before := inner.Calls.Load()
	err = om.Reserve(ctx, "h", ab, time.Minute)
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	require.ErrorIs(t, err, inventory.ErrContention)
	assert.Contains(t, err.Error(), `"b"`)
	assert.Equal(t, before, inner.Calls.Load(), "the refused Reserve did no I/O")
	require.NoError(t, om.Reserve(ctx, "h", []inventory.Line{{SKU: "a", Qty: 1}}, time.Minute),
		"the refused lines call took a's token back")
	require.ErrorIs(t, om.ReturnLines(ctx, ab), ratelimit.ErrLimited)
	require.NoError(t, om.Confirm(ctx, "h"), "Confirm names no SKU: only the global bucket limits it")
	held, err := om.Held(ctx, "a")
	require.NoError(t, err)
	assert.Zero(t, held)
	_, err = om.Sweep(ctx)
	require.NoError(t, err)
}

func TestGlobalLimitsHoldCalls(t *testing.T) {
	ctx := context.Background()
	inner := fakeorders.New(nil)
	m := wrap(t, inner, ratelimit.WithGlobal(1, 2))
	newClock(m)
	om := m.(inventory.OrderManager)
	require.NoError(t, m.Init(ctx, "a", 10))
	require.NoError(t, om.Reserve(ctx, "h", []inventory.Line{{SKU: "a", Qty: 1}}, time.Minute))
	require.NoError(t, om.Cancel(ctx, "h"))
	err := om.Confirm(ctx, "h")
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	assert.Contains(t, err.Error(), `confirm "h"`)
}

func TestOptions(t *testing.T) {
	m := inventorytest.NewMemory(0)
	for name, opt := range map[string]ratelimit.Option{
		"zero rate":      ratelimit.WithGlobal(0, 1),
		"negative rate":  ratelimit.WithPerSKU(-1, 1),
		"zero burst":     ratelimit.WithPerSKU(1, 0),
		"negative burst": ratelimit.WithGlobal(1, -5),
	} {
		_, err := ratelimit.Wrap(m, opt)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
	_, err := ratelimit.Wrap(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	w, err := ratelimit.Wrap(m, nil)
	require.NoError(t, err, "a nil option is ignored; no option limits nothing")
	require.NoError(t, w.Init(context.Background(), "x", 1000))
	for range 1000 {
		_, err := w.Reduce(context.Background(), "x", 1)
		require.NoError(t, err)
	}
}

// Buckets of SKUs nobody calls any more are dropped: 100,000 SKUs cost
// memory only while their buckets are refilling.
func TestIdleBucketsAreDropped(t *testing.T) {
	ctx := context.Background()
	inner := inventorytest.NewMemory(0)
	m := wrap(t, inner, ratelimit.WithPerSKU(10, 5)) // a bucket refills in 0.5s
	clk := newClock(m)
	const skus = 100_000
	sku := func(i int) string { return fmt.Sprintf("sku-%d", i) }
	for i := range skus {
		require.NoError(t, inner.Init(ctx, sku(i), 10))
	}

	// One call per SKU, 100µs apart: at any moment only the SKUs of the
	// last 0.5s (5,000) are refilling.
	most := 0
	for i := range skus {
		_, err := m.Reduce(ctx, sku(i), 1)
		require.NoError(t, err)
		clk.Advance(100 * time.Microsecond)
		most = max(most, ratelimit.Buckets(m))
	}
	t.Logf("at most %d buckets for %d SKUs called once each", most, skus)
	assert.Less(t, most, 20_000, "buckets are bounded by the SKUs called lately, not all SKUs ever called")

	// Every SKU at the same instant: each bucket must be kept (it is
	// not full), then they all go once refilled, with one hot SKU calling.
	for i := range skus {
		_, err := m.Return(ctx, sku(i), 1)
		require.NoError(t, err)
	}
	assert.GreaterOrEqual(t, ratelimit.Buckets(m), skus-5_000, "buckets still refilling are kept")
	clk.Advance(time.Second)
	require.NoError(t, inner.Init(ctx, "hot", 1_000_000))
	for i := range skus / 2 {
		_, _ = m.Reduce(ctx, "hot", 1)
		if i%10 == 0 {
			clk.Advance(time.Millisecond)
		}
	}
	assert.Less(t, ratelimit.Buckets(m), 100, "full buckets are dropped by the calls of other SKUs")
	_, err := m.Reduce(ctx, sku(7), 1)
	require.NoError(t, err, "a dropped bucket comes back full")
}

// The limiter is safe for concurrent use, and lets through no more than the
// burst at one instant, over a real strategy on Redis.
func TestLuascriptOnRedis(t *testing.T) {
	c := testenv.Redis(t)
	inner, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	m := wrap(t, inner, ratelimit.WithPerSKU(1e-3, 20))
	newClock(m) // time stands still: no refill
	ctx := context.Background()
	require.NoError(t, m.Init(ctx, "sneaker", 100))
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			_, err := m.Reduce(ctx, "sneaker", 1)
			switch {
			case err == nil:
				ok.Add(1)
			case assert.ErrorIs(t, err, ratelimit.ErrLimited):
				limited.Add(1)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 20, ok.Load())
	assert.EqualValues(t, 30, limited.Load())
	left, err := m.Get(ctx, "sneaker")
	require.NoError(t, err)
	assert.EqualValues(t, 80, left, "only the admitted calls took stock")
}
