package rediskeys_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
)

func TestValidatePrefix(t *testing.T) {
	require.NoError(t, rediskeys.ValidatePrefix("inv"))
	require.NoError(t, rediskeys.ValidatePrefix("shop:eu"))
	for _, p := range []string{"", "a{b", "}", "a\nb", "\xff", strings.Repeat("p", 65), "x}{y"} {
		require.ErrorIs(t, rediskeys.ValidatePrefix(p), inventory.ErrInvalidArgument, "%q", p)
	}
}

// TestKeysAreDistinct checks that no two (SKU, key) pairs built to collide
// share a Redis key.
func TestKeysAreDistinct(t *testing.T) {
	seen := map[string]string{}
	add := func(k, what string) {
		if prev, ok := seen[k]; ok {
			t.Fatalf("%s and %s share the key %q", prev, what, k)
		}
		seen[k] = what
	}
	skus := []string{"a", "a:1", "a}:s:b", "1:a", "a:k:reduce:1:a", "{a}", "a:"}
	keys := []string{"b", "1:b", "a:b", ":b", "b:"}
	for _, s := range skus {
		add(rediskeys.Stock("inv", s), "stock "+s)
		for _, d := range []driver.Direction{driver.DirReduce, driver.DirReturn} {
			for _, k := range keys {
				add(rediskeys.Key("inv", s, d, k), "key "+s+" "+string(d)+" "+k)
			}
		}
	}
}

// TestLayout pins the key layout that other processes (older versions,
// redisstore, redislock) read: PREFIX{%016x of FNV-1a 64}:s:SKU and so on.
func TestLayout(t *testing.T) {
	for _, sku := range []string{"a", "鞋", "}{", strings.Repeat("z", 255)} {
		h := fnv.New64a()
		h.Write([]byte(sku))
		tag := fmt.Sprintf("{%016x}", h.Sum64())
		require.Equal(t, "inv"+tag+":s:"+sku, rediskeys.Stock("inv", sku))
		require.Equal(t, fmt.Sprintf("inv%s:k:return:%d:%s:k:1", tag, len(sku), sku), rediskeys.Key("inv", sku, driver.DirReturn, "k:1"))
	}
}

// TestSlot checks Slot against the Cluster's own CLUSTER KEYSLOT.
func TestSlot(t *testing.T) {
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	for i := range 200 {
		sku := fmt.Sprint("sku-", i, strings.Repeat("}{", i%3))
		want, err := c.ClusterKeySlot(ctx, rediskeys.Stock("inv", sku)).Result()
		require.NoError(t, err)
		require.EqualValues(t, want, rediskeys.Slot(sku), sku)
	}
}

// TestKeysAllocateOnce checks that building a key costs one allocation.
func TestKeysAllocateOnce(t *testing.T) {
	require.EqualValues(t, 1, testing.AllocsPerRun(100, func() { _ = rediskeys.Stock("inv", "shoe") }))
	require.EqualValues(t, 1, testing.AllocsPerRun(100, func() { _ = rediskeys.Key("inv", "shoe", driver.DirReduce, "k") }))
	require.EqualValues(t, 1, testing.AllocsPerRun(100, func() { _, _, _ = rediskeys.MoveKeys("inv", "shoe", driver.DirReduce, "k") }))
}

// TestMoveKeys checks that MoveKeys builds the keys Stock, HoldMarker and Key
// build.
func TestMoveKeys(t *testing.T) {
	for _, sku := range []string{"a", "鞋", "}{", "a:1", strings.Repeat("z", 255)} {
		for _, d := range []driver.Direction{driver.DirReduce, driver.DirReturn} {
			for _, k := range []string{"", "b", "1:b", "b:"} {
				stock, marker, rec := rediskeys.MoveKeys("shop:eu", sku, d, k)
				require.Equal(t, rediskeys.Stock("shop:eu", sku), stock)
				require.Equal(t, rediskeys.HoldMarker("shop:eu", sku), marker)
				if k == "" {
					require.Empty(t, rec)
				} else {
					require.Equal(t, rediskeys.Key("shop:eu", sku, d, k), rec)
				}
			}
		}
	}
}
