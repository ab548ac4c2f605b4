package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redisstore"
)

// TestWithReplicas: with the one replica of the shared Redis
// (scripts/services.sh, 6390) a write returns after the replica has it;
// asking for two times out with an error that is no sentinel.
func TestWithReplicas(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	r := testenv.RedisReplica(t, c)

	one, prefix := newStore(t, c, redisstore.WithReplicas(1, 5*time.Second))
	require.NoError(t, one.Init(ctx, "shoe", 10))
	for _, key := range []string{"", "k"} {
		n, v, err := one.Read(ctx, "shoe")
		require.NoError(t, err)
		ok, err := one.CompareAndSet(ctx, "shoe", v, n-1, driver.DirReduce, key)
		require.NoError(t, err)
		require.True(t, ok)
		got, err := r.Get(ctx, rediskeys.Stock(prefix, "shoe")).Int64()
		require.NoError(t, err)
		require.Equal(t, n-1, got, "the replica has the acknowledged write (key %q)", key)
	}

	two, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithReplicas(2, 100*time.Millisecond))
	require.NoError(t, err)
	ok, err := two.CompareAndSet(ctx, "shoe", 8, 7, driver.DirReduce, "k2")
	require.ErrorIs(t, err, rediskeys.ErrReplicas)
	require.NotErrorIs(t, err, inventory.ErrDuplicate)
	require.False(t, ok)
	requireStock(t, one, "shoe", 7) // applied on the primary: the outcome was unknown
	_, err = one.CompareAndSet(ctx, "shoe", 7, 6, driver.DirReduce, "k2")
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry is safe")
	require.ErrorIs(t, two.Init(ctx, "boot", 1), rediskeys.ErrReplicas)
	_, err = redisstore.New(c, redisstore.WithReplicas(1, 0))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}
