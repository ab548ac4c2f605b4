package driver_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

func TestValidateSKU(t *testing.T) {
	for _, ok := range []string{"a", "鞋子", "'; DROP TABLE x; --", "{}", " ", strings.Repeat("x", 255), "e\u0301"} {
		require.NoError(t, driver.ValidateSKU(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", 256), "\xff", "a\x00", "\t", "\x7f", "\u0085", "\u009f"} {
		err := driver.ValidateSKU(bad)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "%q", bad)
	}
}

func TestValidateMove(t *testing.T) {
	o, err := driver.ValidateMove("a", 1, []inventory.Option{nil, inventory.WithKey("k")})
	require.NoError(t, err)
	require.Equal(t, "k", o.Key)
	o, err = driver.ValidateMove("a", inventory.MaxStock, nil)
	require.NoError(t, err)
	require.Empty(t, o.Key)
	for _, q := range []int64{0, -1, inventory.MaxStock + 1} {
		_, err = driver.ValidateMove("a", q, nil)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "qty %d", q)
	}
	_, err = driver.ValidateMove("a", 1, []inventory.Option{inventory.WithKey("")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "an explicit empty key is a mistake, not 'no key'")
	_, err = driver.ValidateMove("a", 1, []inventory.Option{inventory.WithKey("x"), inventory.WithKey("")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "the last key wins")
}

func TestValidateInit(t *testing.T) {
	require.NoError(t, driver.ValidateInit("a", 0))
	require.NoError(t, driver.ValidateInit("a", inventory.MaxStock))
	require.ErrorIs(t, driver.ValidateInit("a", -1), inventory.ErrInvalidArgument)
	require.ErrorIs(t, driver.ValidateInit("a", inventory.MaxStock+1), inventory.ErrInvalidArgument)
	require.ErrorIs(t, driver.ValidateInit("", 1), inventory.ErrInvalidArgument)
}

func TestCheckReturn(t *testing.T) {
	require.NoError(t, driver.CheckReturn(0, inventory.MaxStock))
	require.NoError(t, driver.CheckReturn(inventory.MaxStock-1, 1))
	require.ErrorIs(t, driver.CheckReturn(inventory.MaxStock, 1), inventory.ErrInvalidArgument)
	require.ErrorIs(t, driver.CheckReturn(1, inventory.MaxStock), inventory.ErrInvalidArgument)
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
		err := driver.ValidateSKU(sku)
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
		_, err := driver.ValidateMove(sku, qty, opts)
		want := driver.ValidateSKU(sku) == nil && qty >= 1 && qty <= inventory.MaxStock &&
			(!keyed || driver.ValidateSKU(key) == nil)
		if want != (err == nil) {
			t.Fatalf("ValidateMove(%q, %d, key %q keyed %v) = %v", sku, qty, key, keyed, err)
		}
		if err != nil && !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
		}
	})
}

func TestValidateLines(t *testing.T) {
	maxLines := make([]inventory.Line, inventory.MaxLines)
	for i := range maxLines {
		maxLines[i] = inventory.Line{SKU: fmt.Sprint("sku-", i), Qty: 1}
	}
	for name, ls := range map[string][]inventory.Line{
		"one line":       {{SKU: "a", Qty: 1}},
		"MaxLines lines": maxLines,
		"MaxStock":       {{SKU: "a", Qty: inventory.MaxStock}, {SKU: "b", Qty: 1}},
		"255-byte SKU":   {{SKU: strings.Repeat("x", inventory.MaxSKULen), Qty: 1}},
		"byte-distinct":  {{SKU: "a", Qty: 1}, {SKU: "a ", Qty: 1}, {SKU: "A", Qty: 1}, {SKU: "e\u0301", Qty: 1}, {SKU: "\u00e9", Qty: 1}},
	} {
		require.NoError(t, driver.ValidateLines(ls), name)
	}
	for name, c := range map[string]struct {
		lines []inventory.Line
		msg   string // the error names what is wrong
	}{
		"nil":            {nil, "0 lines"},
		"empty":          {[]inventory.Line{}, "0 lines"},
		"MaxLines+1":     {append(slices.Clone(maxLines), inventory.Line{SKU: "one-more", Qty: 1}), "101 lines"},
		"repeated":       {[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}, {SKU: "a", Qty: 2}}, `line 2: sku "a" listed twice`},
		"adjacent":       {[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}, "listed twice"},
		"qty 0":          {[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 0}}, `line 1 ("b"): quantity 0`},
		"qty -1":         {[]inventory.Line{{SKU: "a", Qty: -1}}, "quantity -1"},
		"qty MaxStock+1": {[]inventory.Line{{SKU: "a", Qty: inventory.MaxStock + 1}}, "quantity 9007199254740992"},
		"qty MinInt64":   {[]inventory.Line{{SKU: "a", Qty: math.MinInt64}}, "quantity"},
		"empty SKU":      {[]inventory.Line{{SKU: "a", Qty: 1}, {SKU: "", Qty: 1}}, "line 1: inventory: invalid argument: empty sku"},
		"control SKU":    {[]inventory.Line{{SKU: "a\x00", Qty: 1}}, "line 0"},
		"invalid UTF-8":  {[]inventory.Line{{SKU: "\xff", Qty: 1}}, "UTF-8"},
		"256-byte SKU":   {[]inventory.Line{{SKU: strings.Repeat("x", 256), Qty: 1}}, "256 bytes"},
	} {
		err := driver.ValidateLines(c.lines)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
		require.Contains(t, err.Error(), c.msg, name)
	}
}

func TestValidateLinesCall(t *testing.T) {
	ls := []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}
	o, err := driver.ValidateLinesCall(ls, []inventory.Option{nil, inventory.WithKey("cart-1")})
	require.NoError(t, err)
	require.Equal(t, "cart-1", o.Key)
	o, err = driver.ValidateLinesCall(ls, nil)
	require.NoError(t, err)
	require.Empty(t, o.Key)
	_, err = driver.ValidateLinesCall(ls, []inventory.Option{inventory.WithKey("x"), inventory.WithKey("y")})
	require.NoError(t, err)

	for name, key := range map[string]string{"empty": "", "256 bytes": strings.Repeat("k", 256), "invalid UTF-8": "k\xff", "control": "k\n"} {
		_, err = driver.ValidateLinesCall(ls, []inventory.Option{inventory.WithKey(key)})
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "key %s", name)
		require.Contains(t, err.Error(), "idempotency key", name)
	}
	_, err = driver.ValidateLinesCall(ls, []inventory.Option{inventory.WithKey("x"), inventory.WithKey("")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "the last key wins")
	_, err = driver.ValidateLinesCall(nil, []inventory.Option{inventory.WithKey("good")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "bad lines with a good key")
	_, err = driver.ValidateLinesCall([]inventory.Line{{SKU: "a", Qty: 0}}, nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}

func TestValidateHoldID(t *testing.T) {
	for _, ok := range []string{"order-1", "訂單", "'; DROP TABLE holds; --", "{x}", strings.Repeat("x", 255)} {
		require.NoError(t, driver.ValidateHoldID(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", 256), "\xff", "a\x00", "\t", "\u0085"} {
		err := driver.ValidateHoldID(bad)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "%q", bad)
		require.Contains(t, err.Error(), "hold id", "the error says what was wrong")
	}
}

func TestValidateReserve(t *testing.T) {
	ls := []inventory.Line{{SKU: "a", Qty: 1}}
	for _, ttl := range []time.Duration{inventory.MinHoldTTL, time.Second, 15 * time.Minute, inventory.MaxHoldTTL} {
		require.NoError(t, driver.ValidateReserve("order-1", ls, ttl), "ttl %v", ttl)
	}
	for _, ttl := range []time.Duration{0, -1, -time.Hour, inventory.MinHoldTTL - 1, inventory.MaxHoldTTL + 1, math.MaxInt64, math.MinInt64} {
		err := driver.ValidateReserve("order-1", ls, ttl)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "ttl %v", ttl)
		require.Contains(t, err.Error(), "hold ttl")
	}
	for _, id := range []string{"", strings.Repeat("x", 256), "\xff", "a\x00"} {
		require.ErrorIs(t, driver.ValidateReserve(id, ls, time.Minute), inventory.ErrInvalidArgument, "id %q", id)
	}
	for _, bad := range [][]inventory.Line{nil, {{SKU: "a", Qty: 0}}, {{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}, {{SKU: "", Qty: 1}}} {
		require.ErrorIs(t, driver.ValidateReserve("order-1", bad, time.Minute), inventory.ErrInvalidArgument, "lines %v", bad)
	}
}

// FuzzValidateLines checks ValidateLines against the rule as written:
// 1..MaxLines lines, each SKU valid and listed once, each qty in 1..MaxStock.
func FuzzValidateLines(f *testing.F) {
	f.Add("a", int64(1), "b", int64(2), uint8(2))
	f.Add("a", int64(1), "a", int64(1), uint8(2))
	f.Add("a", int64(0), "b", int64(1), uint8(1))
	f.Add("", int64(1), "b", inventory.MaxStock+1, uint8(2))
	f.Add("x", inventory.MaxStock, "\xff", int64(1), uint8(0))
	f.Add("x", int64(3), "y", int64(3), uint8(101))
	f.Fuzz(func(t *testing.T, sku1 string, q1 int64, sku2 string, q2 int64, n uint8) {
		// n lines: the two given, then distinct filler SKUs of qty 1.
		var ls []inventory.Line
		for i := range int(n) {
			switch i {
			case 0:
				ls = append(ls, inventory.Line{SKU: sku1, Qty: q1})
			case 1:
				ls = append(ls, inventory.Line{SKU: sku2, Qty: q2})
			default:
				ls = append(ls, inventory.Line{SKU: fmt.Sprint("\u2400filler-", i), Qty: 1})
			}
		}
		want := len(ls) >= 1 && len(ls) <= inventory.MaxLines
		seen := map[string]bool{}
		for _, l := range ls {
			want = want && driver.ValidateSKU(l.SKU) == nil && l.Qty >= 1 && l.Qty <= inventory.MaxStock && !seen[l.SKU]
			seen[l.SKU] = true
		}
		err := driver.ValidateLines(ls)
		if want != (err == nil) {
			t.Fatalf("ValidateLines(%v) = %v, want ok %v", ls, err, want)
		}
		if err != nil && !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
		}
	})
}
