package tiered

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestWithReplicas runs tiered on a private Redis with one private replica
// (REPLICAOF): with WithReplicas(1, ...) every acknowledged move, alone or
// merged, is on the replica, state and journal; asking for two replicas,
// or for one while the replica is stopped (SIGSTOP), the moves are refused
// with an error wrapping ErrReplicas and no sentinel, though the primary
// applied them, and their keyed retries are told ErrDuplicate.
func TestWithReplicas(t *testing.T) {
	primary, second := faulttest.StartRedis(t), faulttest.StartRedis(t)
	ctx := ctxT(t, time.Minute)
	var g gate
	rdb := gated(t, primary.Addr(), &g)
	rep := redis.NewClient(&redis.Options{Addr: second.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rep.Close() })
	host, port, _ := strings.Cut(primary.Addr(), ":")
	require.NoError(t, rep.ReplicaOf(ctx, host, port).Err())
	require.Eventually(t, func() bool {
		info, err := rep.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 20*time.Second, 20*time.Millisecond, "the replica follows the primary")

	e := newEnv(t, rdb, testenv.MySQL(t))
	one := e.manager(t, WithChunk(1000), WithLowWater(0), WithReplicas(1, 5*time.Second))
	const sku = "waited"
	require.NoError(t, one.Init(ctx, sku, 100))
	onReplica := func() (int64, int64) {
		v, err := rep.HMGet(ctx, one.stateKey(sku), "a", "p").Result()
		require.NoError(t, err)
		a, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		p, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		return a + p, journalUnits(ctx, t, rep, one.journalKey(sku))
	}
	left, units := onReplica()
	require.EqualValues(t, 100, left, "Init returned after the replica had its state")
	require.Zero(t, units)
	moves := int64(0)
	for _, key := range []string{"", "buyer-1"} {
		var opts []inventory.Option
		if key != "" {
			opts = append(opts, inventory.WithKey(key))
		}
		n, err := one.Reduce(ctx, sku, 1, opts...)
		require.NoError(t, err)
		moves++
		left, units := onReplica()
		require.Equal(t, n, left, "key %q: the replica has the move", key)
		require.Equal(t, moves, units, "and its journal entry")
	}
	_, err := one.Reduce(ctx, sku, 1, inventory.WithKey("buyer-1"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	_, err = one.Reduce(ctx, sku, 1000)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)

	// Merged: the batch waits once, for all its calls.
	out := batched(t, one, &g, sku, reduce(ctx, one, sku, 1, ""),
		reduce(ctx, one, sku, 2, "m1"), reduce(ctx, one, sku, 3, ""), reduce(ctx, one, sku, 4, "m2"))
	for i, o := range out {
		require.NoError(t, o.err, "call %d", i)
	}
	_, batches := g.counts()
	require.Equal(t, []int{3}, batches)
	left, units = onReplica()
	require.EqualValues(t, 100-2-10, left, "the replica has the batch")
	require.EqualValues(t, 2+10, units, "and its journal entries: the lone call's and the batch's")

	// Two replicas asked, one there: the move is on the primary, refused.
	two := e.manager(t, WithReplicas(2, 100*time.Millisecond))
	before, err := two.Get(ctx, sku)
	require.NoError(t, err)
	_, err = two.Reduce(ctx, sku, 1, inventory.WithKey("buyer-2"))
	requireReplicasErr(t, err)
	after, err := two.Get(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, before-1, after, "the move is on the primary: the outcome was unknown, not nothing")
	_, err = one.Reduce(ctx, sku, 1, inventory.WithKey("buyer-2"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry is safe")
	requireReplicasErr(t, two.Init(ctx, "boot", 1))

	// The replica stopped: none acknowledges, alone or merged.
	short := e.manager(t, WithReplicas(1, 100*time.Millisecond))
	second.Pause()
	_, err = short.Reduce(ctx, sku, 1, inventory.WithKey("stopped"))
	requireReplicasErr(t, err)
	out = batched(t, short, &g, sku, reduce(ctx, short, sku, 1, ""),
		reduce(ctx, short, sku, 1, "s1"), reduce(ctx, short, sku, 1, "s2"))
	for _, o := range out {
		requireReplicasErr(t, o.err)
	}
	second.Resume()
	_, err = one.Reduce(ctx, sku, 1, inventory.WithKey("s1"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the merged call had taken effect")
	require.NoError(t, one.Drain(ctx))
	s := one.totals(ctx, t, sku)
	require.EqualValues(t, 2+10+1+1+3, s.sold)
	checkDrained(t, s, 100)
}

// journalUnits returns the net units taken (sold less returned) of the
// journal entries in stream on rdb.
func journalUnits(ctx context.Context, t *testing.T, rdb redis.UniversalClient, stream string) int64 {
	t.Helper()
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	var units int64
	for _, e := range entries {
		_, mv, err := entryMoves(e.Values)
		require.NoError(t, err, "entry %s", e.ID)
		units += mv.sold - mv.returned
	}
	return units
}

// requireReplicasErr checks that err says too few replicas acknowledged,
// and wraps no sentinel.
func requireReplicasErr(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, rediskeys.ErrReplicas)
	for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate, inventory.ErrInvalidArgument, context.DeadlineExceeded} {
		require.NotErrorIs(t, err, s)
	}
}
