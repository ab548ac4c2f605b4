package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
)

// An order record deleted from outside (a cleanup that matched its id)
// leaves its bucket's index entry; the sweep's next step on it drops the
// entry, so it does not come back as due at every sweep.
func TestOrphanIndexEntryLeaves(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, prefix := newStore(t, c)
		id := "orphan-" + t.Name()
		_, err := s.CreateOrder(ctx, id, []inventory.Line{{SKU: "a", Qty: 1}}, time.Millisecond, time.Millisecond)
		require.NoError(t, err)
		keys, err := scanKeys(ctx, c, prefix+"*:o:"+id)
		require.NoError(t, err)
		require.Len(t, keys, 1)
		require.NoError(t, c.Del(ctx, keys[0]).Err())
		require.Eventually(t, func() bool {
			ids, err := s.ExpiredOrders(ctx, 10)
			require.NoError(t, err)
			return len(ids) == 1 && ids[0] == id
		}, 5*time.Second, 5*time.Millisecond, "the index still names the order")

		_, _, err = s.UpdateOrder(ctx, id, lockmgr.StepExpire)
		require.ErrorIs(t, err, inventory.ErrNotFound)
		ids, err := s.ExpiredOrders(ctx, 10)
		require.NoError(t, err)
		require.Empty(t, ids)
		left, err := scanKeys(ctx, c, prefix+"*")
		require.NoError(t, err)
		require.Empty(t, left, "the index key goes with its last entry")
	})
}

// scanKeys lists the keys that match pattern, on every master of a Cluster.
func scanKeys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var keys []string
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
		return keys, err
	}
	return keys, scan(ctx, c)
}
