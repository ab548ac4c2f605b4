package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
		require.NoError(t, inventory.ValidateLines(ls), name)
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
		err := inventory.ValidateLines(c.lines)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
		require.Contains(t, err.Error(), c.msg, name)
	}
}

func TestValidateLinesCall(t *testing.T) {
	ls := []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}
	o, err := inventory.ValidateLinesCall(ls, []inventory.Option{nil, inventory.WithKey("cart-1")})
	require.NoError(t, err)
	require.Equal(t, "cart-1", o.Key)
	o, err = inventory.ValidateLinesCall(ls, nil)
	require.NoError(t, err)
	require.Empty(t, o.Key)
	_, err = inventory.ValidateLinesCall(ls, []inventory.Option{inventory.WithKey("x"), inventory.WithKey("y")})
	require.NoError(t, err)

	for name, key := range map[string]string{"empty": "", "256 bytes": strings.Repeat("k", 256), "invalid UTF-8": "k\xff", "control": "k\n"} {
		_, err = inventory.ValidateLinesCall(ls, []inventory.Option{inventory.WithKey(key)})
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "key %s", name)
		require.Contains(t, err.Error(), "idempotency key", name)
	}
	_, err = inventory.ValidateLinesCall(ls, []inventory.Option{inventory.WithKey("x"), inventory.WithKey("")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "the last key wins")
	_, err = inventory.ValidateLinesCall(nil, []inventory.Option{inventory.WithKey("good")})
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "bad lines with a good key")
	_, err = inventory.ValidateLinesCall([]inventory.Line{{SKU: "a", Qty: 0}}, nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}

func TestValidateHoldID(t *testing.T) {
	for _, ok := range []string{"order-1", "訂單", "'; DROP TABLE holds; --", "{x}", strings.Repeat("x", 255)} {
		require.NoError(t, inventory.ValidateHoldID(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("x", 256), "\xff", "a\x00", "\t", "\u0085"} {
		err := inventory.ValidateHoldID(bad)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "%q", bad)
		require.Contains(t, err.Error(), "hold id", "the error says what was wrong")
	}
}

func TestValidateReserve(t *testing.T) {
	ls := []inventory.Line{{SKU: "a", Qty: 1}}
	for _, ttl := range []time.Duration{inventory.MinHoldTTL, time.Second, 15 * time.Minute, inventory.MaxHoldTTL} {
		require.NoError(t, inventory.ValidateReserve("order-1", ls, ttl), "ttl %v", ttl)
	}
	for _, ttl := range []time.Duration{0, -1, -time.Hour, inventory.MinHoldTTL - 1, inventory.MaxHoldTTL + 1, math.MaxInt64, math.MinInt64} {
		err := inventory.ValidateReserve("order-1", ls, ttl)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "ttl %v", ttl)
		require.Contains(t, err.Error(), "hold ttl")
	}
	for _, id := range []string{"", strings.Repeat("x", 256), "\xff", "a\x00"} {
		require.ErrorIs(t, inventory.ValidateReserve(id, ls, time.Minute), inventory.ErrInvalidArgument, "id %q", id)
	}
	for _, bad := range [][]inventory.Line{nil, {{SKU: "a", Qty: 0}}, {{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}, {{SKU: "", Qty: 1}}} {
		require.ErrorIs(t, inventory.ValidateReserve("order-1", bad, time.Minute), inventory.ErrInvalidArgument, "lines %v", bad)
	}
}

func TestInsufficientError(t *testing.T) {
	e := &inventory.InsufficientError{Short: []inventory.Shortfall{
		{Line: inventory.Line{SKU: "shoe", Qty: 5}, Available: 2},
		{Line: inventory.Line{SKU: `a "quoted" 鞋`, Qty: 1}, Available: 0},
	}}
	require.Equal(t, `inventory: insufficient stock: "shoe" has 2, asked 5, "a \"quoted\" 鞋" has 0, asked 1`, e.Error())
	one := &inventory.InsufficientError{Short: e.Short[:1]}
	require.Equal(t, `inventory: insufficient stock: "shoe" has 2, asked 5`, one.Error())
	require.Equal(t, "inventory: insufficient stock", (&inventory.InsufficientError{}).Error())

	for name, err := range map[string]error{
		"bare":     e,
		"wrapped":  fmt.Errorf("luascript: reduce lines: %w", e),
		"twice":    fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", e)),
		"joined":   errors.Join(errors.New("backend detail"), e),
		"as error": error(e),
		"with ctx": fmt.Errorf("%w (%w)", e, context.Canceled),
		"two %w":   fmt.Errorf("%w; %w", errors.New("x"), e),
	} {
		require.ErrorIs(t, err, inventory.ErrInsufficientStock, name)
		require.NotErrorIs(t, err, inventory.ErrNotFound, name)
		require.NotErrorIs(t, err, inventory.ErrInvalidArgument, name)
		var got *inventory.InsufficientError
		require.ErrorAs(t, err, &got, name)
		require.Same(t, e, got, name)
		require.Equal(t, "shoe", got.Short[0].SKU, name)
	}
	require.Equal(t, inventory.ErrInsufficientStock, errors.Unwrap(e))
	var got *inventory.InsufficientError
	require.False(t, errors.As(inventory.ErrInsufficientStock, &got), "the bare sentinel is not an InsufficientError")
}

// sweeper counts Sweep calls and fails those that fail says to.
type sweeper struct {
	calls chan context.Context
	fail  func(n int) error
	n     atomic.Int64
}

func (s *sweeper) Sweep(ctx context.Context) (int, error) {
	n := int(s.n.Add(1))
	select {
	case s.calls <- ctx:
	default:
	}
	if s.fail != nil {
		return 0, s.fail(n)
	}
	return 1, nil
}

type ctxKey struct{}

func TestReapInvalidPeriod(t *testing.T) {
	s := &sweeper{calls: make(chan context.Context, 1)}
	for _, p := range []time.Duration{0, -1, -time.Hour, math.MinInt64} {
		ctx, cancel := context.WithCancel(context.Background())
		err := inventory.Reap(ctx, s, p, func(error) { t.Error("onErr called") })
		cancel()
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "period %v", p)
		require.NotErrorIs(t, err, context.Canceled)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, inventory.Reap(ctx, s, 0, nil), inventory.ErrInvalidArgument, "the period is checked first")
	require.Zero(t, s.n.Load(), "Reap with a bad period never sweeps")
}

func TestReapSweepsUntilCancelled(t *testing.T) {
	s := &sweeper{calls: make(chan context.Context, 16)}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "mine"))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inventory.Reap(ctx, s, 5*time.Millisecond, nil) }()
	for i := range 3 {
		select {
		case got := <-s.calls:
			require.Equal(t, "mine", got.Value(ctxKey{}), "Sweep runs with Reap's ctx")
		case <-time.After(30 * time.Second):
			t.Fatalf("Reap swept %d times in 30s, period 5ms", i)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Reap returned %v before its ctx was cancelled", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled, "Reap returns ctx.Err()")
	case <-time.After(30 * time.Second):
		t.Fatal("Reap did not return after its ctx was cancelled")
	}
	n := s.n.Load()
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, n, s.n.Load(), "no Sweep after Reap returned")
	// TestMain's goleak check shows Reap left no goroutine behind.
}

func TestReapDeadline(t *testing.T) {
	s := &sweeper{calls: make(chan context.Context, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, inventory.Reap(ctx, s, time.Millisecond, nil), context.DeadlineExceeded)
	require.ErrorIs(t, inventory.Reap(ctx, s, time.Hour, nil), context.DeadlineExceeded, "a done ctx returns at once")
}

func TestReapOnErr(t *testing.T) {
	boom := errors.New("backend down")
	s := &sweeper{calls: make(chan context.Context, 16), fail: func(n int) error {
		if n%2 == 1 {
			return fmt.Errorf("sweep %d: %w", n, boom)
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 64)
	done := make(chan error, 1)
	go func() {
		done <- inventory.Reap(ctx, s, 2*time.Millisecond, func(err error) {
			select {
			case errs <- err:
			default:
			}
		})
	}()
	// The loop carries on past failed sweeps: several failures are reported.
	for i := range 3 {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, boom)
		case <-time.After(30 * time.Second):
			t.Fatalf("onErr received %d errors in 30s", i)
		}
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.GreaterOrEqual(t, s.n.Load(), int64(5), "the successful sweeps between the failures ran")

	// With a nil onErr, failed sweeps are simply dropped.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, inventory.Reap(ctx2, &sweeper{calls: make(chan context.Context, 1), fail: func(int) error { return boom }}, time.Millisecond, nil),
		context.DeadlineExceeded)
}

// TestReapNoErrAfterCancel: a Sweep that fails because Reap's ctx was
// cancelled is not reported to onErr.
func TestReapNoErrAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reported atomic.Int64
	s := &sweeper{calls: make(chan context.Context, 1), fail: func(int) error {
		cancel() // the Sweep sees its ctx cancelled and fails with it
		return fmt.Errorf("sweep: %w", context.Canceled)
	}}
	err := inventory.Reap(ctx, s, time.Millisecond, func(error) { reported.Add(1) })
	require.ErrorIs(t, err, context.Canceled)
	require.GreaterOrEqual(t, s.n.Load(), int64(1))
	require.Zero(t, reported.Load(), "onErr must not receive the error of a Sweep cut short by Reap's own ctx")
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
			want = want && inventory.ValidateSKU(l.SKU) == nil && l.Qty >= 1 && l.Qty <= inventory.MaxStock && !seen[l.SKU]
			seen[l.SKU] = true
		}
		err := inventory.ValidateLines(ls)
		if want != (err == nil) {
			t.Fatalf("ValidateLines(%v) = %v, want ok %v", ls, err, want)
		}
		if err != nil && !errors.Is(err, inventory.ErrInvalidArgument) {
			t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
		}
	})
}

func TestErrHoldNotFound(t *testing.T) {
	require.Equal(t, "inventory: hold not found", inventory.ErrHoldNotFound.Error())
	err := fmt.Errorf("redlock: confirm %q: %w", "h1", inventory.ErrHoldNotFound)
	require.ErrorIs(t, err, inventory.ErrHoldNotFound)
	require.ErrorIs(t, err, inventory.ErrNotFound, "a hold not found is a not found")
	require.NotErrorIs(t, fmt.Errorf("x: %w", inventory.ErrNotFound), inventory.ErrHoldNotFound, "an unknown SKU is not an unknown hold")
	require.NotContains(t, err.Error(), "sku", "a hold's message does not speak of SKUs")
}
