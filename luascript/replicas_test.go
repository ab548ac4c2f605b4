package luascript_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// TestWithReplicas acknowledges moves after WAIT: with one replica (the one
// there is) the replica has every acknowledged write; asking for two can
// only time out, an error that is no sentinel, after Redis applied the move.
func TestWithReplicas(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	r := testenv.RedisReplica(t, c)
	prefix := testenv.RedisPrefix(t, c)
	readReplica := func(sku string) string {
		v, err := r.Get(ctx, rediskeys.Stock(prefix, sku)).Result()
		require.NoError(t, err)
		return v
	}

	one, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithReplicas(1, 5*time.Second))
	require.NoError(t, err)
	require.NoError(t, one.Init(ctx, "shoe", 10))
	require.Equal(t, "10", readReplica("shoe"), "Init returned after the replica had it")
	for _, key := range []string{"", "buyer-1"} {
		var opts []inventory.Option
		if key != "" {
			opts = append(opts, inventory.WithKey(key))
		}
		left, err := one.Reduce(ctx, "shoe", 1, opts...)
		require.NoError(t, err)
		require.Equal(t, readReplica("shoe"), strconv.FormatInt(left, 10), "key %q", key)
	}
	_, err = one.Reduce(ctx, "shoe", 1, inventory.WithKey("buyer-1"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	_, err = one.Reduce(ctx, "shoe", 100)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)

	two, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithReplicas(2, 100*time.Millisecond))
	require.NoError(t, err)
	before, err := two.Get(ctx, "shoe")
	require.NoError(t, err)
	_, err = two.Reduce(ctx, "shoe", 1, inventory.WithKey("buyer-2"))
	require.ErrorIs(t, err, rediskeys.ErrReplicas, "one replica cannot acknowledge for two")
	for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate, inventory.ErrInvalidArgument} {
		require.NotErrorIs(t, err, s)
	}
	after, err := two.Get(ctx, "shoe")
	require.NoError(t, err)
	require.Equal(t, before-1, after, "the move is on the primary: the outcome was unknown, not nothing")
	_, err = one.Reduce(ctx, "shoe", 1, inventory.WithKey("buyer-2"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry is safe")
	require.ErrorIs(t, two.Init(ctx, "boot", 1), rediskeys.ErrReplicas)

	for _, bad := range []luascript.Option{luascript.WithReplicas(-1, time.Second), luascript.WithReplicas(1, 0)} {
		_, err := luascript.New(c, bad)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
}
