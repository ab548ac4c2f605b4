package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/redisstore"
)

// TestSeenWaitsForReplicas: with WithReplicas, a key Seen finds is reported
// found only once the replicas have it. A lock Manager asks Seen before it
// writes, and returns ErrDuplicate on a find: found on a primary whose
// replicas lack it (a write whose WAIT fell short, on a primary a failover
// is about to replace), it would acknowledge a sale the failover loses (the
// Sentinel drill of integration/drills saw one).
func TestSeenWaitsForReplicas(t *testing.T) {
	p := faulttest.StartRedis(t)
	r := faulttest.StartReplica(t, p)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := redisstore.New(c, redisstore.WithReplicas(1, 300*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx, "shoe", 10))

	r.Pause()
	defer r.Resume()
	ok, err := s.CompareAndSet(ctx, "shoe", 10, 9, driver.DirReduce, "buyer")
	require.ErrorIs(t, err, rediskeys.ErrReplicas, "applied on the primary alone: unknown")
	require.False(t, ok)
	_, found, err := s.Seen(ctx, "shoe", driver.DirReduce, "buyer")
	require.ErrorIs(t, err, rediskeys.ErrReplicas, "found on the primary alone: not yet a duplicate")
	require.False(t, found)

	r.Resume()
	rem, found, err := s.Seen(ctx, "shoe", driver.DirReduce, "buyer")
	require.NoError(t, err)
	require.True(t, found, "once the replica has it")
	require.EqualValues(t, 9, rem)
	_, found, err = s.Seen(ctx, "shoe", driver.DirReduce, "nobody")
	require.NoError(t, err)
	require.False(t, found, "a key nobody wrote: not found, with or without replicas")
}
