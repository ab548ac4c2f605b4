package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// stallClient is a client as README advises: each call's ctx bounds its
// I/O; everything else is go-redis's default (ReadTimeout 3s, 3 retries),
// so a call that waited for the client's own timeout would run 2s late.
func stallClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// stallSale sells while srv is stopped for 2.5s (see itest.StallSale): the
// stall must fail some calls.
func stallSale(t *testing.T, m *redislock.Manager, srv *faulttest.Process) {
	res := itest.StallSale(t, newAudit(m), 400, 32, srv.Pause, srv.Resume)
	require.Positive(t, res.Failed, "the stall failed some calls")
}

// TestDeadlineUnderStalledRedis stops the one Redis that holds both the
// locks and the stock in the middle of a sale.
func TestDeadlineUnderStalledRedis(t *testing.T) {
	srv := faulttest.StartRedis(t)
	c := stallClient(t, srv.Addr())
	s, err := redisstore.New(c)
	require.NoError(t, err)
	m, err := redislock.New(c, s, redislock.WithTTL(time.Second))
	require.NoError(t, err)
	stallSale(t, m, srv)
}

// TestDeadlineUnderStalledLockRedis stops only the Redis of the locks; the
// stock lives on the shared Redis, which keeps answering, so the lateness
// measured is the lock's own.
func TestDeadlineUnderStalledLockRedis(t *testing.T) {
	srv := faulttest.StartRedis(t)
	shared := testenv.Redis(t)
	s, err := redisstore.New(stallClient(t, shared.Options().Addr), redisstore.WithPrefix(testenv.RedisPrefix(t, shared)))
	require.NoError(t, err)
	m, err := redislock.New(stallClient(t, srv.Addr()), s, redislock.WithTTL(time.Second))
	require.NoError(t, err)
	stallSale(t, m, srv)
}
