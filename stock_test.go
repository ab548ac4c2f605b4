package inventory_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

func TestValidateSKU(t *testing.T) {
	for _, ok := range []string{"a", "鞋子", "'; DROP TABLE x; --", "{}", " ", strings.Repeat("x", 255), "e\u0301"} {
		require.NoError(t, inventory.ValidateSKU(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", 256), "\xff", "a\x00", "\t", "\x7f", "\u0085", "\u009f"} {
		err := inventory.ValidateSKU(bad)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "%q", bad)
	}
}

func TestValidateMove(t *testing.T) {
	o, err := inventory.ValidateMove("a", 1, []inventory.Option{nil, inventory.WithKey("k")})
	require.NoError(t, err)
	require.Equal(t, "k", o.Key)
	o, err = inventory.ValidateMove("a", inventory.MaxStock, nil)
	require.NoError(t, err)
	require.Empty(t, o.Key)
	for _, q := range []int64{0, -1, inventory.MaxStock + 1} {
		_, err = inventory.ValidateMove("a", q, nil)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "qty %d", q)
	}
	_, err = inventory.ValidateMove("a", 1, []inventory.Option{inventory.WithKey("")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "an explicit empty key is a mistake, not 'no key'")
	_, err = inventory.ValidateMove("a", 1, []inventory.Option{inventory.WithKey("x"), inventory.WithKey("")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "the last key wins")
}

func TestValidateInit(t *testing.T) {
	require.NoError(t, inventory.ValidateInit("a", 0))
	require.NoError(t, inventory.ValidateInit("a", inventory.MaxStock))
	require.ErrorIs(t, inventory.ValidateInit("a", -1), inventory.ErrInvalidArgument)
	require.ErrorIs(t, inventory.ValidateInit("a", inventory.MaxStock+1), inventory.ErrInvalidArgument)
	require.ErrorIs(t, inventory.ValidateInit("", 1), inventory.ErrInvalidArgument)
}

func TestCheckReturn(t *testing.T) {
	require.NoError(t, inventory.CheckReturn(0, inventory.MaxStock))
	require.NoError(t, inventory.CheckReturn(inventory.MaxStock-1, 1))
	require.ErrorIs(t, inventory.CheckReturn(inventory.MaxStock, 1), inventory.ErrInvalidArgument)
	require.ErrorIs(t, inventory.CheckReturn(1, inventory.MaxStock), inventory.ErrInvalidArgument)
}

// FuzzValidateSKU checks ValidateSKU against the rule as written: 1..255
// bytes of valid UTF-8 with no control characters.
func FuzzValidateSKU(f *testing.F) {
	for _, s := range []string{"a", "", "\xff", "鞋", "a\x00b", strings.Repeat("x", 256), "\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sku string) {
		want := len(sku) >= 1 && len(sku) <= inventory.MaxSKULen && utf8.ValidString(sku) &&
			strings.IndexFunc(sku, unicode.IsControl) < 0
		err := inventory.ValidateSKU(sku)
		if want && err != nil {
			t.Fatalf("ValidateSKU(%q) = %v, want nil", sku, err)
		}
		if !want && !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("ValidateSKU(%q) = %v, want ErrInvalidArgument", sku, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "inventory: invalid argument") {
			t.Fatalf("error %q does not lead with the sentinel", err)
		}
	})
}

// FuzzValidateMove checks the quantity bounds and the key rule.
func FuzzValidateMove(f *testing.F) {
	f.Add("a", int64(1), "", false)
	f.Add("a", int64(0), "k", true)
	f.Add("a", inventory.MaxStock+1, "", false)
	f.Add("a", int64(-1), "\xff", true)
	f.Fuzz(func(t *testing.T, sku string, qty int64, key string, keyed bool) {
		var opts []inventory.Option
		if keyed {
			opts = append(opts, inventory.WithKey(key))
		}
		_, err := inventory.ValidateMove(sku, qty, opts)
		want := inventory.ValidateSKU(sku) == nil && qty >= 1 && qty <= inventory.MaxStock &&
			(!keyed || inventory.ValidateSKU(key) == nil)
		if want != (err == nil) {
			t.Fatalf("ValidateMove(%q, %d, key %q keyed %v) = %v", sku, qty, key, keyed, err)
		}
		if err != nil && !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
		}
	})
}
