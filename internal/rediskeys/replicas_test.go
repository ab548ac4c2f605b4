package rediskeys_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// TestReplicatedFoundRecord: a call that only found a record (a script that
// found its key, redisstore's Seen) is acknowledged only once the replicas
// have what it found: WAIT on a connection that wrote nothing still waits
// for the replication offset of the moment (Redis 7.0), so a replica that
// lacks the record (here a stopped one) is not counted.
func TestReplicatedFoundRecord(t *testing.T) {
	p := faulttest.StartRedis(t)
	r := faulttest.StartReplica(t, p)
	writer := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	reader := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { writer.Close(); reader.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "inv{0123456789abcdef}:k:r:shoe:buyer"

	r.Pause()
	defer r.Resume()
	require.NoError(t, writer.Set(ctx, key, "7", 0).Err())
	read := func() int64 {
		var get *redis.StringCmd
		acked, err := rediskeys.Replicated(ctx, reader, key, 1, 300*time.Millisecond, func(p redis.Pipeliner) {
			get = p.Get(ctx, key)
		})
		require.NoError(t, err)
		require.Equal(t, "7", get.Val())
		return acked
	}
	require.Zero(t, read(), "the replica lacks the record found: not acknowledged")
	r.Resume()
	require.EqualValues(t, 1, read(), "once the replica has it")
}
