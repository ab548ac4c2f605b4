package luascript_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
)

func newManager(t *testing.T, c redis.UniversalClient, opts ...luascript.Option) *luascript.Manager {
	t.Helper()
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, append([]luascript.Option{luascript.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	return m
}

func TestConformance(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		c := testenv.Redis(t)
		inventorytest.Run(t, inventorytest.Config{
			NewManager:    func(t *testing.T) inventory.StockManager { return newManager(t, c) },
			RequireOrders: true,
		})
	})
	t.Run("cluster", func(t *testing.T) {
		c := testenv.RedisCluster(t)
		inventorytest.Run(t, inventorytest.Config{
			NewManager:    func(t *testing.T) inventory.StockManager { return newManager(t, c) },
			RequireOrders: true,
		})
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, p := range []string{"", "a{b", "}", "a\nb", string(make([]byte, 65))} {
		_, err := luascript.New(c, luascript.WithPrefix(p))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "prefix %q", p)
	}
	_, err := luascript.New(c, luascript.WithKeyTTL(0))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = luascript.New(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}

func TestKeysOfOneSKUShareASlot(t *testing.T) {
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	for _, sku := range []string{"plain", "}", "}{", "{x}", "a}b{c", "{", "{}", "鞋"} {
		a := rediskeys.Stock("inv", sku)
		b := rediskeys.Key("inv", sku, driver.DirReduce, "}{k")
		sa, err := c.ClusterKeySlot(ctx, a).Result()
		require.NoError(t, err)
		sb, err := c.ClusterKeySlot(ctx, b).Result()
		require.NoError(t, err)
		require.Equal(t, sa, sb, "sku %q: %s and %s", sku, a, b)
	}
}

func TestKeyTTL(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, testenv.Redis(t), luascript.WithKeyTTL(200*time.Millisecond))
	require.NoError(t, m.Init(ctx, "shoe", 10))
	_, err := m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.NoError(t, err)
	_, err = m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	time.Sleep(300 * time.Millisecond)
	rem, err := m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.NoError(t, err, "the key expired")
	require.EqualValues(t, 8, rem)
}

func TestScriptReloadedAfterFlush(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	m := newManager(t, c)
	require.NoError(t, m.Init(ctx, "shoe", 10))
	require.NoError(t, c.ScriptFlush(ctx).Err())
	rem, err := m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err, "EVALSHA falls back to EVAL on NOSCRIPT")
	require.EqualValues(t, 9, rem)
}

func TestServerDown(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	m, err := luascript.New(c)
	require.NoError(t, err)
	for name, call := range map[string]func() error{
		"init":   func() error { return m.Init(ctx, "shoe", 1) },
		"get":    func() error { _, err := m.Get(ctx, "shoe"); return err },
		"reduce": func() error { _, err := m.Reduce(ctx, "shoe", 1); return err },
		"return": func() error { _, err := m.Return(ctx, "shoe", 1); return err },
	} {
		err := call()
		require.Error(t, err, name)
		for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrInvalidArgument} {
			require.NotErrorIs(t, err, s, name)
		}
		var op *net.OpError
		require.ErrorAs(t, err, &op, "%s: the network cause is kept", name)
	}
}

func TestCorruptStockValue(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, rediskeys.Stock(prefix, "shoe"), "lots", 0).Err())
	_, err = m.Reduce(ctx, "shoe", 1)
	require.Error(t, err)
	require.False(t, errors.Is(err, inventory.ErrInsufficientStock))
	require.Contains(t, err.Error(), "does not hold a number")
	_, err = m.Get(ctx, "shoe")
	require.Error(t, err)
	require.False(t, errors.Is(err, inventory.ErrNotFound))
}

// TestExactNearMaxStock moves stock near MaxStock (2^53-1), where a double
// formatted by Lua's tostring (%.14g) loses digits: every value read back,
// returned, or recorded with a key must be exact.
func TestExactNearMaxStock(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, testenv.Redis(t))
	const max = inventory.MaxStock
	require.NoError(t, m.Init(ctx, "big", max))
	check := func(got int64, err error, want int64, what string) {
		t.Helper()
		require.NoError(t, err, what)
		require.Equal(t, want, got, what)
		n, err := m.Get(ctx, "big")
		require.NoError(t, err, what)
		require.Equal(t, want, n, "%s: read back", what)
	}
	left, err := m.Reduce(ctx, "big", 1)
	check(left, err, max-1, "reduce 1")
	left, err = m.Return(ctx, "big", 1)
	check(left, err, max, "return 1")
	left, err = m.Reduce(ctx, "big", 3, inventory.WithKey("b"))
	check(left, err, max-3, "keyed reduce 3")
	left, err = m.Reduce(ctx, "big", 3, inventory.WithKey("b"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	require.Equal(t, max-3, left, "the key recorded the exact remaining")
	left, err = m.Reduce(ctx, "big", max-4)
	check(left, err, 1, "reduce MaxStock-4")
	left, err = m.Return(ctx, "big", max-7, inventory.WithKey("r"))
	check(left, err, max-6, "keyed return MaxStock-7")
	_, err = m.Return(ctx, "big", 7)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "past MaxStock")
	left, err = m.Return(ctx, "big", 6)
	check(left, err, max, "return to MaxStock")
}
