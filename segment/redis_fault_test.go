package segment_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
)

// TestRedisKilledMidSale kills a private redis-server (SIGKILL; its
// append-only file synced on every write) in the middle of a keyed sale
// with refunds on a SKU of 8 segments, whose stock is small enough that
// Reduces borrow (transfers between segments) throughout, and restarts it
// from its file. Calls the kill failed are retried with their key until
// known (faulttest.Sale): no unit is sold twice or lost, initial - final
// == taken - returned, counting the units of transfers the kill left
// pending; then Recover settles those, and the SKU sells exactly what is
// left, the last unit included.
func TestRedisKilledMidSale(t *testing.T) {
	srv := faulttest.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	m, _ := newRedis(t, c, "")
	const sku = "shoe"
	res := faulttest.Sale{Manager: m, SKU: sku, Stock: 200, Buyers: 1000, Refund: 7,
		CallTimeout: 500 * time.Millisecond}.Run(t, func() {
		srv.Kill()
		time.Sleep(time.Second) // longer than a call's budget (go-redis redials within a call)
		srv.Start()
	}, func() {})
	require.Positive(t, res.Failed, "the kill should have failed some calls")

	ctx := bounded(t, time.Minute)
	n, err := m.Recover(ctx, sku)
	require.NoError(t, err)
	t.Logf("Recover settled %d transfers", n)
	left, err := m.Get(ctx, sku)
	require.NoError(t, err)
	assert.Equal(t, res.Final, left, "Recover moved units, it did not make or lose any")
	if left > 0 {
		rem, err := m.Reduce(ctx, sku, left)
		require.NoError(t, err, "the SKU sells what Get says is left, in one Reduce")
		assert.Zero(t, rem)
	}
	_, err = m.Reduce(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	n, err = m.Recover(ctx, sku)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left pending")
}
