package redisstore_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/redisstore"
)

func TestMain(m *testing.M) {
	testenv.SkipExamplesWithout("^Example", testenv.RedisServer)
	faulttest.VerifyTestMain(m)
}

// TestExamples reports the Examples that TestMain left out for want of
// their servers (skipped, or failed when CI=true).
func TestExamples(t *testing.T) { testenv.ExamplesRan(t) }

func newStore(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option) (*redisstore.Store, string) {
	t.Helper()
	prefix := testenv.RedisPrefix(t, c)
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	return s, prefix
}

// servers runs fn against standalone Redis and the Redis Cluster.
func servers(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { fn(t, testenv.Redis(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, testenv.RedisCluster(t)) })
}

func TestNewRefusesBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, p := range []string{"", "a{b", "}", "a\nb", string(make([]byte, 65))} {
		_, err := redisstore.New(c, redisstore.WithPrefix(p))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "prefix %q", p)
	}
	_, err := redisstore.New(c, redisstore.WithKeyTTL(time.Microsecond))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = redisstore.New(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}

func TestInitGetRead(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, c)
		for _, sku := range []string{"shoe", "{x}", "}{", "鞋子", "'; DROP TABLE stock; --"} {
			_, err := s.Get(ctx, sku)
			require.ErrorIs(t, err, inventory.ErrNotFound, "Get %q", sku)
			_, _, err = s.Read(ctx, sku)
			require.ErrorIs(t, err, inventory.ErrNotFound, "Read %q", sku)

			require.NoError(t, s.Init(ctx, sku, inventory.MaxStock))
			n, v, err := s.Read(ctx, sku)
			require.NoError(t, err)
			require.Equal(t, inventory.MaxStock, n)
			require.Equal(t, inventory.MaxStock, v, "the version is the stock")
			require.NoError(t, s.Init(ctx, sku, 7))
			n, err = s.Get(ctx, sku)
			require.NoError(t, err)
			require.EqualValues(t, 7, n)
		}
	})
}

func TestCompareAndSet(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, c)
		const sku = "{shoe}"
		require.NoError(t, s.Init(ctx, sku, 10))

		ok, err := s.CompareAndSet(ctx, sku, 9, 8, driver.DirReduce, "")
		require.NoError(t, err)
		require.False(t, ok, "the version moved")
		requireStock(t, s, sku, 10)

		ok, err = s.CompareAndSet(ctx, sku, 10, 9, driver.DirReduce, "")
		require.NoError(t, err)
		require.True(t, ok)
		requireStock(t, s, sku, 9)

		ok, err = s.CompareAndSet(ctx, "unknown", 0, 1, driver.DirReturn, "")
		require.NoError(t, err)
		require.False(t, ok, "an unknown SKU is never written")
		_, err = s.Get(ctx, "unknown")
		require.ErrorIs(t, err, inventory.ErrNotFound)

		ok, err = s.CompareAndSet(ctx, sku, inventory.MaxStock, 0, driver.DirReduce, "")
		require.NoError(t, err)
		require.False(t, ok, "2^53-1 is compared exactly")
	})
}

func TestIdempotencyKeys(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, c)
		const sku, key = "shoe", "}{order:1"
		require.NoError(t, s.Init(ctx, sku, 10))
		_, found, err := s.Seen(ctx, sku, driver.DirReduce, key)
		require.NoError(t, err)
		require.False(t, found)

		// A write that loses its compare records nothing.
		ok, err := s.CompareAndSet(ctx, sku, 3, 2, driver.DirReduce, key)
		require.NoError(t, err)
		require.False(t, ok)
		_, found, err = s.Seen(ctx, sku, driver.DirReduce, key)
		require.NoError(t, err)
		require.False(t, found, "a failed write does not use up its key")

		ok, err = s.CompareAndSet(ctx, sku, 10, 7, driver.DirReduce, key)
		require.NoError(t, err)
		require.True(t, ok)
		rem, found, err := s.Seen(ctx, sku, driver.DirReduce, key)
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, 7, rem)

		ok, err = s.CompareAndSet(ctx, sku, 7, 4, driver.DirReduce, key)
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.False(t, ok)
		requireStock(t, s, sku, 7)

		// The other direction and another SKU are other entries.
		_, found, err = s.Seen(ctx, sku, driver.DirReturn, key)
		require.NoError(t, err)
		require.False(t, found)
		_, found, err = s.Seen(ctx, sku+" ", driver.DirReduce, key)
		require.NoError(t, err)
		require.False(t, found)
		ok, err = s.CompareAndSet(ctx, sku, 7, 8, driver.DirReturn, key)
		require.NoError(t, err)
		require.True(t, ok)
	})
}

// TestIdempotencyKeysExpire: the key TTL is 100 ms, or longer when the PTTL came
// too late to find the entry still there.
func TestIdempotencyKeysExpire(t *testing.T) {
	testenv.TTLRounds(t, 100*time.Millisecond, 2*time.Second, func(keyTTL time.Duration) bool { return keysExpire(t, keyTTL) })
}

func keysExpire(t *testing.T, keyTTL time.Duration) bool {
	ctx := context.Background()
	c := testenv.Redis(t)
	s, prefix := newStore(t, c, redisstore.WithKeyTTL(keyTTL))
	require.NoError(t, s.Init(ctx, "shoe", 10))
	start := time.Now()
	ok, err := s.CompareAndSet(ctx, "shoe", 10, 9, driver.DirReduce, "k")
	require.NoError(t, err)
	require.True(t, ok)
	ttl, err := c.PTTL(ctx, rediskeys.Key(prefix, "shoe", driver.DirReduce, "k")).Result()
	if !testenv.Live(t, start, keyTTL, "the PTTL") {
		return false
	}
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, keyTTL)
	require.Eventually(t, func() bool {
		_, found, err := s.Seen(ctx, "shoe", driver.DirReduce, "k")
		return err == nil && !found
	}, 5*time.Second, 20*time.Millisecond)
	ok, err = s.CompareAndSet(ctx, "shoe", 9, 8, driver.DirReduce, "k")
	require.NoError(t, err, "an expired entry counts as absent")
	require.True(t, ok)
	return true
}

// TestSharesLuascriptData checks that the store and luascript read and
// write the same keys.
func TestSharesLuascriptData(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, prefix := newStore(t, c)
		lm, err := luascript.New(c, luascript.WithPrefix(prefix))
		require.NoError(t, err)
		const sku = "a{b}c"
		require.NoError(t, lm.Init(ctx, sku, 10))
		rem, err := lm.Reduce(ctx, sku, 3, inventory.WithKey("k"))
		require.NoError(t, err)
		n, v, err := s.Read(ctx, sku)
		require.NoError(t, err)
		require.Equal(t, rem, n)
		got, found, err := s.Seen(ctx, sku, driver.DirReduce, "k")
		require.NoError(t, err)
		require.True(t, found, "the key luascript recorded")
		require.Equal(t, rem, got)

		ok, err := s.CompareAndSet(ctx, sku, v, n-1, driver.DirReduce, "k2")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = lm.Reduce(ctx, sku, 1, inventory.WithKey("k2"))
		require.ErrorIs(t, err, inventory.ErrDuplicate, "luascript sees the key the store recorded")
		got, err = lm.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 6, got)
	})
}

// TestConcurrentCompareAndSet runs optimistic decrement loops on one SKU:
// exactly the successful writes are taken.
func TestConcurrentCompareAndSet(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, c)
		const workers, each = 20, 25
		require.NoError(t, s.Init(ctx, "hot", 1000))
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for done := 0; done < each; {
					n, v, err := s.Read(ctx, "hot")
					if err != nil {
						t.Error(err)
						return
					}
					ok, err := s.CompareAndSet(ctx, "hot", v, n-1, driver.DirReduce, "")
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						done++
					}
				}
			})
		}
		wg.Wait()
		requireStock(t, s, "hot", 1000-workers*each)
	})
}

func TestInvalidArgumentsBeforeIO(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	s, err := redisstore.New(c)
	require.NoError(t, err)
	inv := inventory.ErrInvalidArgument
	for _, sku := range []string{"", "a\x00", "bad\xff"} {
		require.ErrorIs(t, s.Init(ctx, sku, 1), inv)
		_, err = s.Get(ctx, sku)
		require.ErrorIs(t, err, inv)
		_, _, err = s.Read(ctx, sku)
		require.ErrorIs(t, err, inv)
		_, _, err = s.Seen(ctx, sku, driver.DirReduce, "k")
		require.ErrorIs(t, err, inv)
		_, err = s.CompareAndSet(ctx, sku, 1, 0, driver.DirReduce, "")
		require.ErrorIs(t, err, inv)
	}
	require.ErrorIs(t, s.Init(ctx, "ok", -1), inv)
	_, _, err = s.Seen(ctx, "ok", driver.DirReduce, "")
	require.ErrorIs(t, err, inv, "Seen needs a key")
	_, _, err = s.Seen(ctx, "ok", "sideways", "k")
	require.ErrorIs(t, err, inv)
	_, err = s.CompareAndSet(ctx, "ok", 1, 0, driver.DirReduce, "k\n")
	require.ErrorIs(t, err, inv)
	_, err = s.CompareAndSet(ctx, "ok", 1, -1, driver.DirReduce, "")
	require.ErrorIs(t, err, inv)
	_, err = s.CompareAndSet(ctx, "ok", 1, inventory.MaxStock+1, driver.DirReturn, "")
	require.ErrorIs(t, err, inv)
}

func TestServerErrorsAreWrapped(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	s, err := redisstore.New(c)
	require.NoError(t, err)
	check := func(err error, what string) {
		t.Helper()
		var op *net.OpError
		require.ErrorAs(t, err, &op, what)
		require.NotErrorIs(t, err, inventory.ErrNotFound, what)
	}
	check(s.Init(ctx, "shoe", 1), "Init")
	_, err = s.Get(ctx, "shoe")
	check(err, "Get")
	_, _, err = s.Read(ctx, "shoe")
	check(err, "Read")
	_, _, err = s.Seen(ctx, "shoe", driver.DirReduce, "k")
	check(err, "Seen")
	_, err = s.CompareAndSet(ctx, "shoe", 1, 0, driver.DirReduce, "k")
	check(err, "CompareAndSet")
}

func TestCancelledContext(t *testing.T) {
	c := testenv.Redis(t)
	s, _ := newStore(t, c)
	require.NoError(t, s.Init(context.Background(), "shoe", 5))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Init(ctx, "shoe", 1), context.Canceled)
	_, err := s.Get(ctx, "shoe")
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = s.Read(ctx, "shoe")
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = s.Seen(ctx, "shoe", driver.DirReduce, "k")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.CompareAndSet(ctx, "shoe", 5, 4, driver.DirReduce, "k")
	require.ErrorIs(t, err, context.Canceled)
	requireStock(t, s, "shoe", 5)
}

func requireStock(t *testing.T, s *redisstore.Store, sku string, want int64) {
	t.Helper()
	n, err := s.Get(context.Background(), sku)
	require.NoError(t, err)
	require.Equal(t, want, n)
}
