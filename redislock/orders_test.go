package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// downStore is a HoldStore that fails every call once down is set, as a
// process that crashed would make none.
type downStore struct {
	lockmgr.HoldStore
	down  *atomic.Bool
	holds *atomic.Int64 // the Hold after which it goes down: 2 for the second
	after int64
}

var errCrashed = errors.New("test: the process crashed")

func (d downStore) Hold(ctx context.Context, sku string, version, newStock int64, id string, qty int64, expires time.Time) (bool, error) {
	if d.holds.Add(1) == d.after {
		d.down.Store(true)
	}
	if d.down.Load() {
		return false, errCrashed
	}
	return d.HoldStore.Hold(ctx, sku, version, newStock, id, qty, expires)
}

func (d downStore) Unhold(ctx context.Context, sku, id string, sold bool) (int64, error) {
	if d.down.Load() {
		return 0, errCrashed
	}
	return d.HoldStore.Unhold(ctx, sku, id, sold)
}

func (d downStore) UpdateOrder(ctx context.Context, id string, step lockmgr.OrderStep) (lockmgr.Order, bool, error) {
	if d.down.Load() {
		return lockmgr.Order{}, false, errCrashed
	}
	return d.HoldStore.UpdateOrder(ctx, id, step)
}

// skusOnMasters returns one SKU per Cluster master, so that a cart's lines
// span every shard.
func skusOnMasters(t *testing.T, c *redis.ClusterClient, prefix string) []string {
	ctx := context.Background()
	seen := map[string]bool{}
	var skus []string
	for i := 0; len(skus) < 3 && i < 1000; i++ {
		sku := fmt.Sprint("cart-", i)
		node, err := c.MasterForKey(ctx, rediskeys.Stock(prefix, sku))
		require.NoError(t, err)
		if addr := node.Options().Addr; !seen[addr] {
			seen[addr] = true
			skus = append(skus, sku)
		}
	}
	require.Len(t, skus, 3, "the Cluster has three masters")
	return skus
}

// TestReserveAcrossShardsCrash reserves a cart whose three lines live on
// the three masters of the Cluster, and "crashes" the process after the
// first line is held: it can hold no more and give nothing back. Only a
// hold is left: its unit is out of the available stock (never sold twice),
// no one can confirm it, and Sweep gives it back once the abandon grace
// has passed since the order was recorded (and the TTL, after which Sweep
// looks at it); the Reserve's final effect is none.
func TestReserveAcrossShardsCrash(t *testing.T) {
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	// The hold lasts 200 ms, or longer when the second Reserve came late.
	testenv.TTLRounds(t, 200*time.Millisecond, 4*time.Second, func(ttl time.Duration) bool {
		prefix := testenv.RedisPrefix(t, c)
		rs, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		l, err := redislock.NewLocker(c, redislock.WithPrefix(lockPrefix(t, c)))
		require.NoError(t, err)
		const grace = 500 * time.Millisecond
		down := new(atomic.Bool)
		crashing, err := lockmgr.NewManager(l, downStore{HoldStore: rs, down: down, holds: new(atomic.Int64), after: 2},
			lockmgr.WithName("redislock"), lockmgr.WithAbandonGrace(grace))
		require.NoError(t, err)
		m, err := lockmgr.NewManager(l, rs, lockmgr.WithName("redislock"), lockmgr.WithAbandonGrace(grace))
		require.NoError(t, err)

		skus := skusOnMasters(t, c, prefix)
		for _, s := range skus {
			require.NoError(t, m.Init(ctx, s, 5))
		}
		cart := []inventory.Line{{SKU: skus[0], Qty: 2}, {SKU: skus[1], Qty: 1}, {SKU: skus[2], Qty: 1}}
		start := time.Now()
		require.ErrorIs(t, crashing.Reserve(ctx, "order-1", cart, ttl), errCrashed)

		want := func(sku string, available, held int64) {
			t.Helper()
			n, err := m.Get(ctx, sku)
			require.NoError(t, err)
			h, err := m.Held(ctx, sku)
			require.NoError(t, err)
			require.Equal(t, [2]int64{available, held}, [2]int64{n, h}, "available and held units of %q", sku)
		}
		want(skus[0], 3, 2)
		want(skus[1], 5, 0)
		require.ErrorIs(t, m.Confirm(ctx, "order-1"), inventory.ErrNotFound)
		err = m.Reserve(ctx, "order-1", cart, ttl)
		if !testenv.Live(t, start, ttl, "the Reserve of the crashed Reserve's id") {
			return false
		}
		require.ErrorIs(t, err, inventory.ErrContention, "the crashed Reserve may still be running: its id is busy, not used")

		time.Sleep(time.Until(start.Add(ttl + grace + 100*time.Millisecond)))
		n, err := m.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		for _, s := range skus {
			want(s, 5, 0)
		}
		require.NoError(t, m.Reserve(ctx, "order-1", cart, time.Minute), "the id is free again")
		require.NoError(t, m.Confirm(ctx, "order-1"))
		want(skus[0], 3, 0)
		want(skus[2], 4, 0)
		return true
	})
}
