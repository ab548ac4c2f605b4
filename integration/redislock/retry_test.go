package redislock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/redisstore"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/redislock"
)

// TestAcquireWhenTheClientRetries cuts the reply of a lock acquire that
// Redis ran. go-redis, on its default settings, sends the script again on a
// new connection (here the fault clears as it dials), which finds the lock
// held by its own token: that is a lock taken, not one to wait for.
func TestAcquireWhenTheClientRetries(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	srv := faulttest.StartRedis(t)
	p := netfault.NewProxy(t, srv.Addr())
	var redials atomic.Int64
	c := itest.RetryingClient(t, p, &redials) // MaxRetries: the default, 3
	// The hook-free form of this test: a Manager whose lock client is c,
	// over a store on a client of its own, so that only lock traffic
	// crosses the proxy. (NewLocker is an export_test.go hook of package
	// redislock, out of reach from this module.)
	store := faulttest.StartRedis(t)
	sc := redis.NewClient(&redis.Options{Addr: store.Addr()})
	t.Cleanup(func() { sc.Close() })
	s, err := redisstore.New(sc)
	require.NoError(t, err)
	m, err := redislock.New(c, s, redislock.WithPrefix("inv"), redislock.WithTTL(time.Minute), redislock.WithAcquireTimeout(2*time.Second))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 10))
	// Load the scripts, so that the reply cut is the acquire's, not NOSCRIPT.
	_, err = m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err)

	redials.Store(0)
	p.CutAfterBytes(3) // of ":-1\r\n"
	left, err := m.Reduce(ctx, "shoe", 1)
	require.Positive(t, redials.Load(), "the reply was cut and the client sent the script again")
	require.NoError(t, err, "the retried acquire found its own lock")
	require.EqualValues(t, 8, left)
}
