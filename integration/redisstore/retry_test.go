package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/redisstore"
)

// TestCompareAndSetRunsOnceWhenTheClientRetries cuts the reply of a write
// that Redis ran, on a client that resends (go-redis's default settings).
// The Store's scripts are never sent twice (rediskeys.Script, NoRetry): the
// caller gets the broken connection's error (the outcome unknown), the
// client does not send the script again, the write ran once, and a keyed
// retry is safe.
func TestCompareAndSetRunsOnceWhenTheClientRetries(t *testing.T) {
	ctx := context.Background()
	srv := faulttest.StartRedis(t)
	p := netfault.NewProxy(t, srv.Addr())
	var redials atomic.Int64
	c := itest.RetryingClient(t, p, &redials) // MaxRetries: the default, 3
	s, err := redisstore.New(c)
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx, "shoe", 10))
	// Load the script, so that the reply cut is the write's, not NOSCRIPT.
	ok, err := s.CompareAndSet(ctx, "shoe", 10, 9, driver.DirReduce, "")
	require.NoError(t, err)
	require.True(t, ok)

	stock := int64(9)
	for _, key := range []string{"", "buyer-1"} {
		redials.Store(0)
		p.CutAfterBytes(3) // of ":1\r\n"
		_, err := s.CompareAndSet(ctx, "shoe", stock, stock-1, driver.DirReduce, key)
		require.Error(t, err, "key %q: the reply was lost, the outcome is unknown to the caller", key)
		require.Zero(t, redials.Load(), "key %q: the client did not send the script again", key)
		stock--
		requireStock(t, s, "shoe", stock) // the write ran once
	}
	rem, found, err := s.Seen(ctx, "shoe", driver.DirReduce, "buyer-1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, stock, rem)
	_, err = s.CompareAndSet(ctx, "shoe", stock, stock-1, driver.DirReduce, "buyer-1")
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry after an unknown outcome is safe")
	requireStock(t, s, "shoe", stock)
}

// TestStalledRedis freezes a private Redis (SIGSTOP): every Store method,
// over a client with ContextTimeoutEnabled, returns within its deadline
// plus inventory.DeadlineSlack with an error; after SIGCONT the store
// serves again and no write was applied twice.
func TestStalledRedis(t *testing.T) {
	ctx := context.Background()
	srv := faulttest.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}) // MaxRetries: the default
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c)
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx, "shoe", 10))
	srv.Pause()
	const d = 500 * time.Millisecond
	for name, call := range map[string]func(ctx context.Context) error{
		"init": func(ctx context.Context) error { return s.Init(ctx, "other", 1) },
		"get":  func(ctx context.Context) error { _, err := s.Get(ctx, "shoe"); return err },
		"read": func(ctx context.Context) error { _, _, err := s.Read(ctx, "shoe"); return err },
		"seen": func(ctx context.Context) error {
			_, _, err := s.Seen(ctx, "shoe", driver.DirReduce, "k")
			return err
		},
		"cas": func(ctx context.Context) error {
			_, err := s.CompareAndSet(ctx, "shoe", 10, 9, driver.DirReduce, "k")
			return err
		},
		"cas unkeyed": func(ctx context.Context) error {
			_, err := s.CompareAndSet(ctx, "shoe", 10, 9, driver.DirReduce, "")
			return err
		},
	} {
		_, err := faulttest.CheckLate(t, name, d, call)
		require.Error(t, err, name)
	}
	srv.Resume()
	// The stalled writes may run once Redis continues; the key tells.
	rem, found, err := s.Seen(ctx, "shoe", driver.DirReduce, "k")
	require.NoError(t, err)
	n, err := s.Get(ctx, "shoe")
	require.NoError(t, err)
	require.True(t, n == 10 || n == 9, "at most one of the two CAS 10->9 ran: %d", n)
	if found {
		require.EqualValues(t, 9, rem)
		require.EqualValues(t, 9, n)
	}
}
