package rediskeys_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
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
		add(rediskeys.Window("inv", s, "0123456789abcdef", 29000000), "window "+s)
		for _, d := range []inventory.Direction{inventory.DirReduce, inventory.DirReturn} {
			for _, k := range keys {
				add(rediskeys.Key("inv", s, d, k), "key "+s+" "+string(d)+" "+k)
			}
		}
	}
}
