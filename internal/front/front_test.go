package front_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/refusals"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake counts the calls that reach it and fails with err.
type fake struct {
	calls int
	key   string
	err   error
}

func (f *fake) Init(context.Context, string, int64) error { f.calls++; return f.err }
func (f *fake) Get(context.Context, string) (int64, error) {
	f.calls++
	return 7, f.err
}
func (f *fake) Move(_ context.Context, _ string, _ int64, _ driver.Direction, key string) (int64, error) {
	f.calls++
	f.key = key
	return 3, f.err
}

func TestBadInputNeverReachesTheBackend(t *testing.T) {
	b := &fake{}
	f := front.New("strat", backend{b, &orders{}}, nil)
	ctx := context.Background()
	for _, err := range []error{
		f.Init(ctx, "", 1),
		f.Init(ctx, "a", -1),
		func() error { _, err := f.Get(ctx, "a\x00"); return err }(),
		func() error { _, err := f.Reduce(ctx, "a", 0); return err }(),
		func() error { _, err := f.Return(ctx, "a", inventory.MaxStock+1); return err }(),
		func() error { _, err := f.Reduce(ctx, "a", 1, inventory.WithKey("")); return err }(),
	} {
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
		require.True(t, strings.HasPrefix(err.Error(), "strat: "), err.Error())
	}
	require.Zero(t, b.calls)
}

func TestDoneContextNeverReachesTheBackend(t *testing.T) {
	b := &fake{}
	f := front.New("strat", backend{b, &orders{}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.Reduce(ctx, "a", 1)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, f.Init(ctx, "a", 1), context.Canceled)
	_, err = f.Get(ctx, "a")
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, b.calls)
}

func TestErrorsAreWrappedOnce(t *testing.T) {
	b := &fake{err: inventory.ErrInsufficientStock}
	f := front.New("strat", backend{b, &orders{}}, nil)
	n, err := f.Reduce(context.Background(), "shoe", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.Equal(t, int64(3), n, "the backend's value comes with its error")
	require.Equal(t, `strat: reduce "shoe": inventory: insufficient stock`, err.Error())
	require.Equal(t, "k", b.key)

	b.err = errors.New("strat: named in the text only")
	_, err = f.Return(context.Background(), "shoe", 1)
	require.Equal(t, `strat: return "shoe": strat: named in the text only`, err.Error(), "errors are not matched by their text")

	b.err = &front.Error{Strategy: "strat", Op: "lock", Subject: "shoe", Err: inventory.ErrContention}
	_, err = f.Return(context.Background(), "shoe", 1)
	require.Equal(t, `strat: lock "shoe": inventory: contention, gave up`, err.Error(), "an *Error of the strategy's own is not wrapped again")

	b.err = &front.Error{Strategy: "other", Op: "lock", Subject: "shoe", Err: inventory.ErrContention}
	_, err = f.Return(context.Background(), "shoe", 1)
	require.Equal(t, `strat: return "shoe": other: lock "shoe": inventory: contention, gave up`, err.Error(), "another strategy's *Error is wrapped")

	b.err = nil
	n, err = f.Get(context.Background(), "shoe")
	require.NoError(t, err)
	require.Equal(t, int64(7), n)
}

// TestNoAllocation checks that the front adds no allocation to a call that
// succeeds, beyond what driver.ValidateMove itself costs (its collected
// options escape through the Option funcs): luascript's hot path must not
// pay for the front.
func TestNoAllocation(t *testing.T) {
	f := front.New("strat", backend{&fake{}, &orders{}}, nil)
	ctx := context.Background()
	key := inventory.WithKey("k")
	opts := []inventory.Option{key}
	validate := testing.AllocsPerRun(1000, func() {
		if _, err := driver.ValidateMove("shoe", 1, opts); err != nil {
			t.Fatal(err)
		}
	})
	reduce := testing.AllocsPerRun(1000, func() {
		if _, err := f.Reduce(ctx, "shoe", 1, opts...); err != nil {
			t.Fatal(err)
		}
	})
	get := testing.AllocsPerRun(1000, func() {
		if _, err := f.Get(ctx, "shoe"); err != nil {
			t.Fatal(err)
		}
	})
	require.Equal(t, validate, reduce, "Reduce allocates what ValidateMove does, no more")
	require.Zero(t, get)
}

// With refusals, a refusal of the backend (the fake says 3 units) keeps
// the Reduces over 3 from the backend; a Return, keyed or not, and an Init
// drop it; keyed Reduces and those that fit always reach the backend.
func TestRefusals(t *testing.T) {
	b := &fake{err: inventory.ErrInsufficientStock}
	f := front.New("strat", backend{b, &orders{}}, refusals.New(time.Hour))
	ctx := context.Background()
	refuse := func() {
		t.Helper()
		_, err := f.Reduce(ctx, "a", 5)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	}
	local := func(qty int64) bool {
		t.Helper()
		before := b.calls
		n, err := f.Reduce(ctx, "a", qty)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
		require.EqualValues(t, 3, n)
		return b.calls == before && errors.Is(err, front.ErrRefusedHere)
	}
	refuse()
	require.True(t, local(4), "over the stock seen: refused here")
	require.False(t, local(3), "fits the stock seen: asked")
	before := b.calls
	_, _ = f.Reduce(ctx, "a", 4, inventory.WithKey("k"))
	require.Equal(t, before+1, b.calls, "a keyed Reduce is asked")

	for name, add := range map[string]func(){
		"return":       func() { _, _ = f.Return(ctx, "a", 1) },
		"keyed return": func() { _, _ = f.Return(ctx, "a", 1, inventory.WithKey("r")) },
		"init":         func() { _ = f.Init(ctx, "a", 1) },
	} {
		refuse()
		require.True(t, local(4), name)
		add()
		require.False(t, local(4), "after a %s: asked", name)
	}
}

// backend is a fake Backend: fake for the stock calls, orders for the
// order calls.
type backend struct {
	*fake
	*orders
}

// orders is a fake of the order calls of a Backend that counts the calls reaching it and
// fails them with err.
type orders struct {
	calls int
	key   string
	dir   driver.Direction
	err   error
}

func (o *orders) MoveLines(_ context.Context, _ []inventory.Line, dir driver.Direction, key string) error {
	o.calls++
	o.dir, o.key = dir, key
	return o.err
}
func (o *orders) Reserve(context.Context, string, []inventory.Line, time.Duration) error {
	o.calls++
	return o.err
}
func (o *orders) Confirm(context.Context, string) error { o.calls++; return o.err }
func (o *orders) Cancel(context.Context, string) error  { o.calls++; return o.err }
func (o *orders) Held(context.Context, string) (int64, error) {
	o.calls++
	return 4, o.err
}
func (o *orders) Sweep(context.Context) (int, error) { o.calls++; return 2, o.err }

// TestOrdersBadInputNeverReachesTheBackend: every order call checks its
// arguments first, and a done ctx, before the backend sees it.
func TestOrdersBadInputNeverReachesTheBackend(t *testing.T) {
	o := &orders{}
	f := front.New("strat", backend{&fake{}, o}, nil)
	ctx := context.Background()
	line := []inventory.Line{{SKU: "a", Qty: 1}}
	for name, err := range map[string]error{
		"no lines":        f.ReduceLines(ctx, nil),
		"twice":           f.ReturnLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 2}}),
		"zero qty":        f.ReduceLines(ctx, []inventory.Line{{SKU: "a", Qty: 0}}),
		"empty key":       f.ReduceLines(ctx, line, inventory.WithKey("")),
		"reserve id":      f.Reserve(ctx, "", line, time.Minute),
		"reserve ttl":     f.Reserve(ctx, "h", line, 0),
		"reserve lines":   f.Reserve(ctx, "h", nil, time.Minute),
		"confirm id":      f.Confirm(ctx, "a\x00"),
		"cancel id":       f.Cancel(ctx, string(make([]byte, inventory.MaxSKULen+1))),
		"held sku":        func() error { _, err := f.Held(ctx, ""); return err }(),
		"reserve \xff id": f.Reserve(ctx, "\xff", line, time.Minute),
	} {
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
		require.True(t, strings.HasPrefix(err.Error(), "strat: "), "%s: %v", name, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	for name, err := range map[string]error{
		"reduce lines": f.ReduceLines(done, line),
		"return lines": f.ReturnLines(done, line),
		"reserve":      f.Reserve(done, "h", line, time.Minute),
		"confirm":      f.Confirm(done, "h"),
		"cancel":       f.Cancel(done, "h"),
		"held":         func() error { _, err := f.Held(done, "a"); return err }(),
		"sweep":        func() error { _, err := f.Sweep(done); return err }(),
	} {
		require.ErrorIs(t, err, context.Canceled, name)
	}
	require.Zero(t, o.calls)
}

// TestOrdersWrap: the order calls reach the backend with the key and
// direction, and their errors are wrapped once, naming the call and the
// hold id or SKU.
func TestOrdersWrap(t *testing.T) {
	o := &orders{err: inventory.ErrHoldNotFound}
	f := front.New("strat", backend{&fake{}, o}, nil)
	ctx := context.Background()
	line := []inventory.Line{{SKU: "a", Qty: 1}}

	err := f.Confirm(ctx, "h1")
	require.ErrorIs(t, err, inventory.ErrNotFound)
	require.Equal(t, `strat: confirm "h1": inventory: hold not found`, err.Error())
	var fe *front.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, front.Error{Strategy: "strat", Op: "confirm", Subject: "h1", Err: inventory.ErrHoldNotFound}, *fe)

	o.err = &front.Error{Strategy: "strat", Op: "deep", Err: inventory.ErrContention}
	err = f.ReturnLines(ctx, line, inventory.WithKey("k"))
	require.Equal(t, "strat: deep: inventory: contention, gave up", err.Error(), "an error of the strategy's own is not wrapped again")
	require.Equal(t, "k", o.key)
	require.Equal(t, driver.DirReturn, o.dir)

	o.err = nil
	require.NoError(t, f.ReduceLines(ctx, line))
	require.Equal(t, driver.DirReduce, o.dir)
	require.Empty(t, o.key)
	n, err := f.Held(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	released, err := f.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, released)
	require.NoError(t, f.Reserve(ctx, "h", line, time.Minute))
	require.NoError(t, f.Cancel(ctx, "h"))
}
