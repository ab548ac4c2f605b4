package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

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

func TestErrHoldNotFound(t *testing.T) {
	require.Equal(t, "inventory: hold not found", inventory.ErrHoldNotFound.Error())
	err := fmt.Errorf("redlock: confirm %q: %w", "h1", inventory.ErrHoldNotFound)
	require.ErrorIs(t, err, inventory.ErrHoldNotFound)
	require.ErrorIs(t, err, inventory.ErrNotFound, "a hold not found is a not found")
	require.NotErrorIs(t, fmt.Errorf("x: %w", inventory.ErrNotFound), inventory.ErrHoldNotFound, "an unknown SKU is not an unknown hold")
	require.NotContains(t, err.Error(), "sku", "a hold's message does not speak of SKUs")
}
