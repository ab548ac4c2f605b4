package inventorytest

import (
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

// orderManager is what the order subtests need: a manager that implements
// both interfaces.
type orderManager interface {
	inventory.StockManager
	inventory.OrderManager
}

// expiryMargin covers the gap between the backend's clock and the client's
// reading of its own after Reserve returns.
const expiryMargin = 25 * time.Millisecond

// runOrders runs the order subtests if the manager implements
// inventory.OrderManager.
func (s *suite) runOrders(t *testing.T) {
	t.Helper()
	probe := s.cfg.NewManager(t)
	if _, ok := probe.(inventory.OrderManager); !ok {
		if s.cfg.RequireOrders {
			t.Errorf("inventorytest: Config.RequireOrders is set, but %T does not implement inventory.OrderManager", probe)
		} else {
			t.Logf("inventorytest: %T is not an inventory.OrderManager; the order subtests did not run", probe)
		}
		return
	}
	t.Run("Orders", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			fn   func(*testing.T, orderManager)
		}{
			{"ReduceLines", s.testReduceLines},
			{"ReturnLines", s.testReturnLines},
			{"AllOrNothing", s.testAllOrNothing},
			{"LinesKeys", s.testLinesKeys},
			{"Reserve", s.testReserve},
			{"Confirm", s.testConfirm},
			{"Cancel", s.testCancel},
			{"UnknownHold", s.testUnknownHold},
			{"ReserveDuplicate", s.testReserveDuplicate},
			{"FailedReserveKeepsID", s.testFailedReserveKeepsID},
			{"CancelledContext", s.testOrdersCancelledContext},
			{"InvalidArguments", s.testOrdersInvalidArguments},
			{"ExpiryWithTraffic", s.testExpiryWithTraffic},
			{"ConfirmAfterExpiry", s.testConfirmAfterExpiry},
			{"CancelAfterExpiry", s.testCancelAfterExpiry},
			{"Sweep", s.testSweep},
			{"Reap", s.testReap},
			{"ConcurrentSameHold", s.testConcurrentSameHold},
			{"ConfirmRacesCancel", s.testConfirmRacesCancel},
			{"ConfirmRacesExpiry", s.testConfirmRacesExpiry},
			{"Carts", s.testCarts},
		} {
			t.Run(tc.name, func(t *testing.T) {
				m := s.cfg.NewManager(t)
				om, ok := m.(orderManager)
				if !ok {
					t.Fatalf("inventorytest: NewManager returned %T, which does not implement inventory.OrderManager, after one that did", m)
				}
				tc.fn(t, om)
			})
		}
	})
}

// skus makes one SKU per quantity, initialised to it.
func (s *suite) skus(t *testing.T, ctx context.Context, m orderManager, qtys ...int64) []string {
	t.Helper()
	out := make([]string, len(qtys))
	for i, q := range qtys {
		out[i] = s.osku(t, fmt.Sprintf("sku-%d", i))
		mustInit(t, ctx, m, out[i], q)
	}
	return out
}

// start is the common start of an order subtest: a context for its calls,
// its id function (see id) and SKUs initialised to qtys (see skus).
func (s *suite) start(t *testing.T, m orderManager, qtys ...int64) (context.Context, func(name string) string, []string) {
	t.Helper()
	ctx := quick(t)
	id := func(name string) string { return s.id(t, name) }
	return ctx, id, s.skus(t, ctx, m, qtys...)
}

// id returns a hold id or idempotency key unique to this run and subtest:
// ids and the keys of the lines calls are not per SKU, so a backend shared
// by successive managers (or runs) must not see one twice.
func (s *suite) id(t *testing.T, name string) string { return s.osku(t, "id/"+name) }

// osku returns a SKU unique to this run and order subtest, apart from those
// of the StockManager subtest of the same name.
func (s *suite) osku(t *testing.T, name string) string { return s.sku(t, "orders/"+name) }

// requireLevels checks the available and held units of sku.
func requireLevels(t *testing.T, ctx context.Context, m orderManager, sku string, available, held int64) {
	t.Helper()
	requireStock(t, ctx, m, sku, available)
	got, err := m.Held(ctx, sku)
	require.NoError(t, err, "Held(%q)", sku)
	require.Equal(t, held, got, "held units of %q", sku)
}

func lines(kv ...any) []inventory.Line {
	out := make([]inventory.Line, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		var q int64
		switch v := kv[i+1].(type) {
		case int:
			q = int64(v)
		case int64:
			q = v
		default:
			panic(fmt.Sprintf("lines: qty %T", v))
		}
		out = append(out, inventory.Line{SKU: kv[i].(string), Qty: q})
	}
	return out
}

// longTTL is the TTL of holds the suite does not let expire.
func (s *suite) longTTL() time.Duration { return max(s.cfg.Timeout, time.Minute) }

// expiredAfter is how long after Reserve returned a hold of ttl is surely
// past its TTL on the backend's clock.
func (s *suite) expiredAfter(ttl time.Duration) time.Duration {
	return ttl + s.cfg.ClockResolution + expiryMargin
}

// reserveShort reserves lines under id for HoldTTL and returns when the hold
// is surely past its TTL.
func (s *suite) reserveShort(t *testing.T, ctx context.Context, m orderManager, id string, ls []inventory.Line) time.Time {
	t.Helper()
	require.NoError(t, m.Reserve(ctx, id, ls, s.cfg.HoldTTL), "Reserve(%q, TTL %v)", id, s.cfg.HoldTTL)
	return time.Now().Add(s.expiredAfter(s.cfg.HoldTTL))
}

func sleepUntil(ctx context.Context, when time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(when)):
	}
}

// retry runs op until it reports something other than ErrContention or ctx
// is done. Between attempts it backs off as a well-behaved client does: a
// random pause of up to 1ms, doubling per attempt up to 64ms. A call still
// refused when ctx ends says so.
func (s *suite) retry(ctx context.Context, op func() error) error {
	for attempt := 0; ; attempt++ {
		err := op()
		if !errors.Is(err, inventory.ErrContention) {
			return err
		}
		pause := time.Millisecond << min(attempt, 6)
		select {
		case <-ctx.Done():
			return fmt.Errorf("inventorytest: still refused after %d attempts when the subtest's ctx ended (%w): %w", attempt+1, ctx.Err(), err)
		case <-time.After(time.Duration(mrand.Int64N(int64(pause))) + time.Microsecond):
		}
	}
}

func (s *suite) testReduceLines(t *testing.T, m orderManager) {
	ctx := quick(t)
	sk := s.skus(t, ctx, m, 10, 5, inventory.MaxStock)
	require.NoError(t, m.ReduceLines(ctx, lines(sk[0], 3, sk[1], 5, sk[2], inventory.MaxStock)))
	requireLevels(t, ctx, m, sk[0], 7, 0)
	requireLevels(t, ctx, m, sk[1], 0, 0)
	requireLevels(t, ctx, m, sk[2], 0, 0)
	require.NoError(t, m.ReduceLines(ctx, lines(sk[0], 7)), "one line")
	requireLevels(t, ctx, m, sk[0], 0, 0)

	// MaxLines lines in one call.
	many := make([]inventory.Line, inventory.MaxLines)
	for i := range many {
		many[i] = inventory.Line{SKU: s.osku(t, fmt.Sprintf("many-%d", i)), Qty: 2}
		mustInit(t, ctx, m, many[i].SKU, 3)
	}
	require.NoError(t, m.ReduceLines(ctx, many), "%d lines", inventory.MaxLines)
	for _, l := range many {
		requireStock(t, ctx, m, l.SKU, 1)
	}
}

func (s *suite) testReturnLines(t *testing.T, m orderManager) {
	ctx := quick(t)
	sk := s.skus(t, ctx, m, 0, 5, inventory.MaxStock-3)
	require.NoError(t, m.ReturnLines(ctx, lines(sk[0], 4, sk[1], 1, sk[2], 3)))
	requireLevels(t, ctx, m, sk[0], 4, 0)
	requireLevels(t, ctx, m, sk[1], 6, 0)
	requireLevels(t, ctx, m, sk[2], inventory.MaxStock, 0)
}

// requireShort checks that err is an *inventory.InsufficientError whose
// Short lists, in call order, only lines of call that are in short (their
// available stock as given), and at least one.
func requireShort(t *testing.T, err error, call []inventory.Line, short map[string]int64) {
	t.Helper()
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	var ie *inventory.InsufficientError
	require.ErrorAs(t, err, &ie, "the error of a refused cart is an *inventory.InsufficientError")
	require.NotEmpty(t, ie.Short, "InsufficientError names at least one line")
	last := -1
	for _, sf := range ie.Short {
		avail, ok := short[sf.SKU]
		require.True(t, ok, "InsufficientError names %q, which was not short (short: %v)", sf.SKU, short)
		idx := -1
		for i, l := range call {
			if l.SKU == sf.SKU {
				idx = i
			}
		}
		require.Greater(t, idx, last, "Short lists each short line once, in the order of the call's lines: %+v", ie.Short)
		last = idx
		require.Equal(t, call[idx], sf.Line, "Short carries the line as asked")
		require.Equal(t, avail, sf.Available, "Short carries the available stock of %q", sf.SKU)
	}
	if len(short) == 1 {
		require.Len(t, ie.Short, 1)
	}
	require.Contains(t, err.Error(), fmt.Sprintf("%q", ie.Short[0].SKU), "the message names the short line")
}

func (s *suite) testAllOrNothing(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 2, 10, inventory.MaxStock-1)
	a, b, c, full := sk[0], sk[1], sk[2], sk[3]
	unknown := s.osku(t, "unknown")
	unchanged := func() {
		t.Helper()
		requireLevels(t, ctx, m, a, 10, 0)
		requireLevels(t, ctx, m, b, 2, 0)
		requireLevels(t, ctx, m, c, 10, 0)
		requireLevels(t, ctx, m, full, inventory.MaxStock-1, 0)
		_, err := m.Get(ctx, unknown)
		require.ErrorIs(t, err, inventory.ErrNotFound, "a refused call must not create a SKU")
	}

	// One short line, first, in the middle or last: no line moves.
	for _, call := range [][]inventory.Line{
		lines(a, 3, b, 5, c, 1),
		lines(b, 3, a, 3, c, 1),
		lines(a, 10, c, 10, b, 3),
	} {
		requireShort(t, m.ReduceLines(ctx, call), call, map[string]int64{b: 2})
		unchanged()
		requireShort(t, m.Reserve(ctx, id("hold-short"), call, s.longTTL()), call, map[string]int64{b: 2})
		unchanged()
	}
	// Two short lines: the strategy names one or both.
	call := lines(a, 3, b, 5, c, 11, full, 1)
	requireShort(t, m.ReduceLines(ctx, call), call, map[string]int64{b: 2, c: 10})
	unchanged()
	requireShort(t, m.Reserve(ctx, id("hold-short"), call, s.longTTL()), call, map[string]int64{b: 2, c: 10})
	unchanged()

	// An unknown SKU anywhere: ErrNotFound, nothing moves.
	for _, call := range [][]inventory.Line{lines(a, 1, unknown, 1), lines(unknown, 1, a, 1, c, 1)} {
		err := m.ReduceLines(ctx, call)
		require.ErrorIs(t, err, inventory.ErrNotFound, "ReduceLines with an unknown SKU")
		require.NotErrorIs(t, err, inventory.ErrInsufficientStock)
		unchanged()
		require.ErrorIs(t, m.ReturnLines(ctx, call), inventory.ErrNotFound, "ReturnLines with an unknown SKU")
		unchanged()
		require.ErrorIs(t, m.Reserve(ctx, id("hold-unknown"), call, s.longTTL()), inventory.ErrNotFound, "Reserve with an unknown SKU")
		unchanged()
	}

	// A return past MaxStock on one line: ErrInvalidArgument, nothing moves.
	for _, call := range [][]inventory.Line{lines(a, 1, full, 2), lines(full, 2, a, 1), lines(a, 1, full, inventory.MaxStock)} {
		err := m.ReturnLines(ctx, call)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "ReturnLines past MaxStock")
		require.NotErrorIs(t, err, inventory.ErrInsufficientStock)
		unchanged()
	}

	// The refused calls used up nothing: the same carts fit once stock is there.
	require.NoError(t, m.Reserve(ctx, id("hold-short"), lines(a, 1, b, 1), s.longTTL()), "a refused Reserve does not use up its id")
	requireLevels(t, ctx, m, a, 9, 1)
	requireLevels(t, ctx, m, b, 1, 1)
	require.NoError(t, m.ReturnLines(ctx, lines(a, 1, full, 1)))
	requireLevels(t, ctx, m, full, inventory.MaxStock, 0)
}

func (s *suite) testLinesKeys(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 20, 20)
	a, b := sk[0], sk[1]
	cart := lines(a, 2, b, 3)
	key := inventory.WithKey(id("cart-1"))

	require.NoError(t, m.ReduceLines(ctx, cart, key))
	for range 3 {
		require.ErrorIs(t, m.ReduceLines(ctx, cart, key), inventory.ErrDuplicate, "a repeated ReduceLines with one key")
	}
	require.ErrorIs(t, m.ReduceLines(ctx, lines(a, 1), key), inventory.ErrDuplicate,
		"the key belongs to the call, not to its lines: other lines with the same key are a duplicate")
	require.ErrorIs(t, m.ReduceLines(ctx, lines(a, 100), key), inventory.ErrDuplicate,
		"a repeat is a duplicate even where its lines would not fit now")
	requireLevels(t, ctx, m, a, 18, 0)
	requireLevels(t, ctx, m, b, 17, 0)

	// The other direction is another call.
	require.NoError(t, m.ReturnLines(ctx, cart, key), "ReturnLines with the key of a ReduceLines")
	require.ErrorIs(t, m.ReturnLines(ctx, cart, key), inventory.ErrDuplicate, "a repeated ReturnLines with one key")
	requireLevels(t, ctx, m, a, 20, 0)
	requireLevels(t, ctx, m, b, 20, 0)

	// Single-SKU calls keep their keys apart from the lines calls'.
	rem, err := m.Reduce(ctx, a, 1, key)
	require.NoError(t, err, "a single-SKU Reduce with the key of a ReduceLines")
	require.EqualValues(t, 19, rem)
	require.NoError(t, m.ReduceLines(ctx, cart, inventory.WithKey(id("cart-2"))), "another key")
	require.NoError(t, m.ReduceLines(ctx, cart), "no key")
	require.NoError(t, m.ReduceLines(ctx, cart), "no key, again: calls without a key are never duplicates")
	requireLevels(t, ctx, m, a, 13, 0)
	requireLevels(t, ctx, m, b, 11, 0)

	// Calls that failed did not use up their keys.
	k3 := inventory.WithKey(id("cart-3"))
	requireShort(t, m.ReduceLines(ctx, lines(a, 1, b, 1000), k3), lines(a, 1, b, 1000), map[string]int64{b: 11})
	require.ErrorIs(t, m.ReduceLines(ctx, lines(a, 1, s.osku(t, "unknown"), 1), k3), inventory.ErrNotFound)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, m.ReduceLines(cancelled, cart, k3), context.Canceled)
	require.NoError(t, m.ReduceLines(ctx, cart, k3), "the failed ReduceLines calls did not use up their key")
	requireLevels(t, ctx, m, a, 11, 0)
	requireLevels(t, ctx, m, b, 8, 0)
	mustInit(t, ctx, m, a, inventory.MaxStock)
	require.ErrorIs(t, m.ReturnLines(ctx, cart, k3), inventory.ErrInvalidArgument)
	require.NoError(t, m.ReturnLines(ctx, lines(b, 1), k3), "the failed ReturnLines did not use up its key")
	requireLevels(t, ctx, m, a, inventory.MaxStock, 0)
	requireLevels(t, ctx, m, b, 9, 0)
}

func (s *suite) testReserve(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 5)
	a, b := sk[0], sk[1]
	require.NoError(t, m.Reserve(ctx, id("order-1"), lines(a, 3, b, 5), s.longTTL()))
	requireLevels(t, ctx, m, a, 7, 3)
	requireLevels(t, ctx, m, b, 0, 5)

	// Held units are offered to nobody else.
	rem, err := m.Reduce(ctx, b, 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock, "Reduce of a SKU whose units are all held")
	require.EqualValues(t, 0, rem)
	requireShort(t, m.ReduceLines(ctx, lines(a, 1, b, 1)), lines(a, 1, b, 1), map[string]int64{b: 0})
	requireShort(t, m.Reserve(ctx, id("order-2"), lines(b, 1), s.longTTL()), lines(b, 1), map[string]int64{b: 0})
	requireLevels(t, ctx, m, a, 7, 3)
	requireLevels(t, ctx, m, b, 0, 5)

	require.NoError(t, m.Reserve(ctx, id("order-2"), lines(a, 7), s.longTTL()))
	requireLevels(t, ctx, m, a, 0, 10)
	// Return and Init move the available stock only.
	_, err = m.Return(ctx, b, 2)
	require.NoError(t, err)
	requireLevels(t, ctx, m, b, 2, 5)
	require.NoError(t, m.Reserve(ctx, id("order-3"), lines(b, 2), s.longTTL()))
	requireLevels(t, ctx, m, b, 0, 7)
}

func (s *suite) testConfirm(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 5)
	a, b := sk[0], sk[1]
	require.NoError(t, m.Reserve(ctx, id("order-1"), lines(a, 3, b, 2), s.longTTL()))
	require.NoError(t, m.Confirm(ctx, id("order-1")))
	requireLevels(t, ctx, m, a, 7, 0)
	requireLevels(t, ctx, m, b, 3, 0)

	for range 2 {
		require.ErrorIs(t, m.Confirm(ctx, id("order-1")), inventory.ErrDuplicate, "Confirm of a confirmed hold")
		err := m.Cancel(ctx, id("order-1"))
		require.ErrorIs(t, err, inventory.ErrHoldConfirmed, "Cancel of a confirmed hold")
		require.NotErrorIs(t, err, inventory.ErrNotFound)
		requireLevels(t, ctx, m, a, 7, 0)
		requireLevels(t, ctx, m, b, 3, 0)
	}
	// Another hold is untouched by the first one's Confirm.
	require.NoError(t, m.Reserve(ctx, id("order-2"), lines(a, 1), s.longTTL()))
	require.NoError(t, m.Reserve(ctx, id("order-3"), lines(a, 2), s.longTTL()))
	require.NoError(t, m.Confirm(ctx, id("order-3")))
	requireLevels(t, ctx, m, a, 4, 1)
	require.NoError(t, m.Cancel(ctx, id("order-2")))
	requireLevels(t, ctx, m, a, 5, 0)
}

func (s *suite) testCancel(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 5)
	a, b := sk[0], sk[1]
	require.NoError(t, m.Reserve(ctx, id("order-1"), lines(a, 3, b, 5), s.longTTL()))
	require.NoError(t, m.Cancel(ctx, id("order-1")))
	requireLevels(t, ctx, m, a, 10, 0)
	requireLevels(t, ctx, m, b, 5, 0)
	for range 3 {
		require.NoError(t, m.Cancel(ctx, id("order-1")), "Cancel is idempotent")
		requireLevels(t, ctx, m, a, 10, 0)
		requireLevels(t, ctx, m, b, 5, 0)
	}
	err := m.Confirm(ctx, id("order-1"))
	require.ErrorIs(t, err, inventory.ErrHoldReleased, "Confirm of a cancelled hold")
	require.NotErrorIs(t, err, inventory.ErrDuplicate)
	requireLevels(t, ctx, m, a, 10, 0)
	requireLevels(t, ctx, m, b, 5, 0)
	require.NoError(t, m.Cancel(ctx, id("order-1")), "Cancel after a refused Confirm")
	requireLevels(t, ctx, m, b, 5, 0)
}

func (s *suite) testUnknownHold(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10)
	err := m.Confirm(ctx, id("never-reserved"))
	require.ErrorIs(t, err, inventory.ErrHoldNotFound, "Confirm of an unknown hold")
	require.ErrorIs(t, err, inventory.ErrNotFound, "ErrHoldNotFound wraps ErrNotFound")
	require.NotErrorIs(t, err, inventory.ErrHoldReleased)
	err = m.Cancel(ctx, id("never-reserved"))
	require.ErrorIs(t, err, inventory.ErrHoldNotFound, "Cancel of an unknown hold")
	require.ErrorIs(t, err, inventory.ErrNotFound, "ErrHoldNotFound wraps ErrNotFound")
	_, err = m.Held(ctx, s.osku(t, "never-initialised"))
	require.ErrorIs(t, err, inventory.ErrNotFound, "Held of an unknown SKU")
	// Asking about an id creates nothing.
	require.NoError(t, m.Reserve(ctx, id("never-reserved"), lines(sk[0], 1), s.longTTL()))
	require.NoError(t, m.Confirm(ctx, id("never-reserved")))
	requireLevels(t, ctx, m, sk[0], 9, 0)
}

func (s *suite) testReserveDuplicate(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10, 1)
	a, b, c := sk[0], sk[1], sk[2]
	dup := func(id string, availA, heldA int64) {
		t.Helper()
		for _, ls := range [][]inventory.Line{lines(a, 1), lines(b, 2), lines(a, 1, b, 1)} {
			require.ErrorIs(t, m.Reserve(ctx, id, ls, s.longTTL()), inventory.ErrDuplicate, "Reserve of a used id %q", id)
		}
		requireLevels(t, ctx, m, a, availA, heldA)
		requireLevels(t, ctx, m, b, 10, 0)
	}
	require.NoError(t, m.Reserve(ctx, id("live"), lines(a, 1), s.longTTL()))
	dup(id("live"), 9, 1)
	require.NoError(t, m.Reserve(ctx, id("confirmed"), lines(a, 1), s.longTTL()))
	require.NoError(t, m.Confirm(ctx, id("confirmed")))
	dup(id("confirmed"), 8, 1)
	require.NoError(t, m.Reserve(ctx, id("cancelled"), lines(a, 1), s.longTTL()))
	require.NoError(t, m.Cancel(ctx, id("cancelled")))
	dup(id("cancelled"), 8, 1)

	expired := s.reserveShort(t, ctx, m, id("expired"), lines(a, 2))
	sleepUntil(ctx, expired)
	for _, ls := range [][]inventory.Line{lines(a, 1), lines(b, 2)} {
		require.ErrorIs(t, m.Reserve(ctx, id("expired"), ls, s.longTTL()), inventory.ErrDuplicate, "Reserve of an expired hold's id")
	}
	_, err := m.Sweep(ctx)
	require.NoError(t, err)
	requireLevels(t, ctx, m, a, 8, 1)
	requireLevels(t, ctx, m, b, 10, 0)
	dup(id("expired"), 8, 1)
	require.NoError(t, m.Confirm(ctx, id("live")), "the duplicates left the live hold alone")
	requireLevels(t, ctx, m, a, 8, 0)

	// The retry of a Reserve that took the last unit (its reply lost) is
	// told the duplicate it is, not that the stock ran out.
	require.NoError(t, m.Reserve(ctx, id("last"), lines(c, 1), s.longTTL()))
	require.ErrorIs(t, m.Reserve(ctx, id("last"), lines(c, 1), s.longTTL()), inventory.ErrDuplicate,
		"a retry of the Reserve that took the last unit")
	requireLevels(t, ctx, m, c, 0, 1)
}

func (s *suite) testFailedReserveKeepsID(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 2)
	a := sk[0]
	requireShort(t, m.Reserve(ctx, id("f"), lines(a, 5), s.longTTL()), lines(a, 5), map[string]int64{a: 2})
	require.ErrorIs(t, m.Reserve(ctx, id("f"), lines(a, 1, s.osku(t, "unknown"), 1), s.longTTL()), inventory.ErrNotFound)
	require.ErrorIs(t, m.Reserve(ctx, id("f"), lines(a, 1), 0), inventory.ErrInvalidArgument)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, m.Reserve(cancelled, id("f"), lines(a, 1), s.longTTL()), context.Canceled)
	requireLevels(t, ctx, m, a, 2, 0)
	require.ErrorIs(t, m.Confirm(ctx, id("f")), inventory.ErrHoldNotFound, "a failed Reserve leaves no hold")
	require.NoError(t, m.Reserve(ctx, id("f"), lines(a, 2), s.longTTL()), "the failed Reserves did not use up their id")
	requireLevels(t, ctx, m, a, 0, 2)
	require.NoError(t, m.Confirm(ctx, id("f")))
}

func (s *suite) testOrdersCancelledContext(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10)
	a, b := sk[0], sk[1]
	require.NoError(t, m.Reserve(ctx, id("live"), lines(a, 1), s.longTTL()))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		check := func(what string, err error) {
			t.Helper()
			require.ErrorIs(t, err, c.want, "%s with a done context", what)
			require.NotErrorIs(t, err, inventory.ErrInsufficientStock, what)
			require.NotErrorIs(t, err, inventory.ErrNotFound, what)
		}
		check("ReduceLines", m.ReduceLines(c.ctx, lines(a, 1, b, 1)))
		check("keyed ReduceLines", m.ReduceLines(c.ctx, lines(a, 1, b, 1), inventory.WithKey(id("k"))))
		check("ReturnLines", m.ReturnLines(c.ctx, lines(a, 1, b, 1)))
		check("Reserve", m.Reserve(c.ctx, id("new"), lines(a, 1), s.longTTL()))
		check("Confirm", m.Confirm(c.ctx, id("live")))
		check("Cancel", m.Cancel(c.ctx, id("live")))
		_, err := m.Held(c.ctx, a)
		check("Held", err)
		_, err = m.Sweep(c.ctx)
		check("Sweep", err)
	}
	requireLevels(t, ctx, m, a, 9, 1)
	requireLevels(t, ctx, m, b, 10, 0)
	require.NoError(t, m.ReduceLines(ctx, lines(a, 1, b, 1), inventory.WithKey(id("k"))), "the failed call did not use up its key")
	require.NoError(t, m.Reserve(ctx, id("new"), lines(a, 1), s.longTTL()), "the failed Reserve did not use up its id")
	require.NoError(t, m.Confirm(ctx, id("live")), "the failed Confirm and Cancel left the hold live")
	requireLevels(t, ctx, m, a, 7, 1)
	requireLevels(t, ctx, m, b, 9, 0)
}

func (s *suite) testOrdersInvalidArguments(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10)
	a, b := sk[0], sk[1]
	unknown := s.osku(t, "unknown")
	require.NoError(t, m.Reserve(ctx, id("live"), lines(a, 1), s.longTTL()))
	// A call with bad arguments is refused before it looks at ctx or the
	// backend: with a cancelled context it still reports ErrInvalidArgument.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	inv := inventory.ErrInvalidArgument
	both := func(what string, call func(context.Context) error) {
		t.Helper()
		require.ErrorIs(t, call(ctx), inv, "%s", what)
		require.ErrorIs(t, call(cancelled), inv, "%s with a cancelled context: arguments are checked before any I/O", what)
	}

	tooMany := make([]inventory.Line, inventory.MaxLines+1)
	for i := range tooMany {
		tooMany[i] = inventory.Line{SKU: s.osku(t, fmt.Sprintf("many-%d", i)), Qty: 1}
	}
	badLines := map[string][]inventory.Line{
		"nil lines":           nil,
		"no lines":            {},
		"MaxLines+1 lines":    tooMany,
		"repeated SKU":        lines(a, 1, b, 1, a, 1),
		"repeated SKU, twice": lines(b, 1, b, 1),
		"repeated unknown":    lines(unknown, 1, unknown, 1),
	}
	for _, q := range []int64{0, -1, inventory.MaxStock + 1, math.MaxInt64, math.MinInt64} {
		badLines[fmt.Sprintf("qty %d", q)] = lines(a, 1, b, q)
		badLines[fmt.Sprintf("qty %d first", q)] = lines(b, q, a, 1)
	}
	for name, bad := range badSKUs() {
		badLines["sku "+name] = lines(a, 1, bad, 1)
	}
	for name, ls := range badLines {
		t.Run(name, func(t *testing.T) {
			both("ReduceLines", func(c context.Context) error { return m.ReduceLines(c, ls) })
			both("keyed ReduceLines", func(c context.Context) error { return m.ReduceLines(c, ls, inventory.WithKey(id("k"))) })
			both("ReturnLines", func(c context.Context) error { return m.ReturnLines(c, ls) })
			both("Reserve", func(c context.Context) error { return m.Reserve(c, id("new"), ls, s.longTTL()) })
		})
	}
	for name, bad := range badSKUs() {
		t.Run("id "+name, func(t *testing.T) {
			both("Reserve", func(c context.Context) error { return m.Reserve(c, bad, lines(a, 1), s.longTTL()) })
			both("Confirm", func(c context.Context) error { return m.Confirm(c, bad) })
			both("Cancel", func(c context.Context) error { return m.Cancel(c, bad) })
			both("Held", func(c context.Context) error { _, err := m.Held(c, bad); return err })
		})
	}
	for _, ttl := range []time.Duration{0, -1, -time.Hour, inventory.MinHoldTTL - 1, inventory.MaxHoldTTL + 1, math.MaxInt64, math.MinInt64} {
		t.Run(fmt.Sprintf("ttl %d", ttl), func(t *testing.T) {
			both("Reserve", func(c context.Context) error { return m.Reserve(c, id("new"), lines(a, 1), ttl) })
		})
	}
	for name, key := range map[string]string{
		"empty key": "", "256-byte key": strings.Repeat("k", 256),
		"invalid UTF-8 key": "k\xff", "control key": "k\x00",
	} {
		t.Run(name, func(t *testing.T) {
			both("ReduceLines", func(c context.Context) error { return m.ReduceLines(c, lines(a, 1), inventory.WithKey(key)) })
			both("ReturnLines", func(c context.Context) error { return m.ReturnLines(c, lines(a, 1), inventory.WithKey(key)) })
		})
	}

	// Nothing changed: levels, the unknown SKUs, the ids.
	requireLevels(t, ctx, m, a, 9, 1)
	requireLevels(t, ctx, m, b, 10, 0)
	for _, sku := range []string{unknown, tooMany[0].SKU} {
		_, err := m.Get(ctx, sku)
		require.ErrorIs(t, err, inventory.ErrNotFound, "a refused call must not create a SKU")
	}
	require.NoError(t, m.ReduceLines(ctx, lines(b, 1), inventory.WithKey(id("k"))), "a refused call does not use up its key")
	require.NoError(t, m.Reserve(ctx, id("new"), lines(a, 1, b, 1), s.longTTL()), "a refused Reserve does not use up its id")
	require.NoError(t, m.Confirm(ctx, id("live")))
	requireLevels(t, ctx, m, a, 8, 1)
	requireLevels(t, ctx, m, b, 8, 1)
}

func (s *suite) testExpiryWithTraffic(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10, 10, 10)
	a, b, c, d := sk[0], sk[1], sk[2], sk[3]
	for i, sku := range sk {
		s.reserveShort(t, ctx, m, id(fmt.Sprintf("hold-%d", i)), lines(sku, 4))
	}
	requireStock(t, ctx, m, d, 6)
	sleepUntil(ctx, time.Now().Add(s.expiredAfter(s.cfg.HoldTTL)))

	// Each call that moves a SKU first releases its expired holds, in the
	// same atomic step: the units it finds include the released ones.
	rem, err := m.Reduce(ctx, a, 1)
	require.NoError(t, err)
	require.EqualValues(t, 9, rem, "Reduce after a hold expired: the hold's units are back before the Reduce takes its own")
	requireLevels(t, ctx, m, a, 9, 0)
	rem, err = m.Return(ctx, b, 1)
	require.NoError(t, err)
	require.EqualValues(t, 11, rem, "Return after a hold expired")
	requireLevels(t, ctx, m, b, 11, 0)
	require.NoError(t, m.ReduceLines(ctx, lines(c, 10)), "ReduceLines of every unit, 4 of them in an expired hold")
	requireLevels(t, ctx, m, c, 0, 0)
	require.NoError(t, m.Reserve(ctx, id("hold-new"), lines(d, 10), s.longTTL()), "Reserve of every unit, 4 of them in an expired hold")
	requireLevels(t, ctx, m, d, 0, 10)

	// The expired holds stay released.
	for i := range sk {
		require.ErrorIs(t, m.Confirm(ctx, id(fmt.Sprintf("hold-%d", i))), inventory.ErrHoldReleased, "Confirm of an expired hold")
		require.NoError(t, m.Cancel(ctx, id(fmt.Sprintf("hold-%d", i))), "Cancel of an expired hold")
	}
	_, err = m.Sweep(ctx)
	require.NoError(t, err)
	requireLevels(t, ctx, m, a, 9, 0)
	requireLevels(t, ctx, m, b, 11, 0)
	requireLevels(t, ctx, m, c, 0, 0)
	requireLevels(t, ctx, m, d, 0, 10)
}

func (s *suite) testConfirmAfterExpiry(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10)
	a, b := sk[0], sk[1]
	sleepUntil(ctx, s.reserveShort(t, ctx, m, id("late"), lines(a, 3, b, 4)))
	// Nobody touched the SKUs and nothing swept: Confirm itself finds the
	// hold past its TTL, refuses, and the units are back.
	err := m.Confirm(ctx, id("late"))
	require.ErrorIs(t, err, inventory.ErrHoldReleased, "Confirm after the TTL")
	require.NotErrorIs(t, err, inventory.ErrDuplicate)
	requireLevels(t, ctx, m, a, 10, 0)
	requireLevels(t, ctx, m, b, 10, 0)
	require.ErrorIs(t, m.Confirm(ctx, id("late")), inventory.ErrHoldReleased, "Confirm again")
	require.NoError(t, m.Cancel(ctx, id("late")))
	_, err = m.Sweep(ctx)
	require.NoError(t, err)
	requireLevels(t, ctx, m, a, 10, 0)
	requireLevels(t, ctx, m, b, 10, 0)
}

func (s *suite) testCancelAfterExpiry(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10, 10)
	a, b, c := sk[0], sk[1], sk[2]
	s.reserveShort(t, ctx, m, id("x-a"), lines(a, 4))
	s.reserveShort(t, ctx, m, id("x-b"), lines(b, 4))
	sleepUntil(ctx, s.reserveShort(t, ctx, m, id("x-c"), lines(c, 4)))

	// Cancel first, then Sweep: the units come back once.
	require.NoError(t, m.Cancel(ctx, id("x-a")), "Cancel of an expired hold nobody released yet")
	requireLevels(t, ctx, m, a, 10, 0)
	// Lazy release first, then Cancel.
	rem, err := m.Reduce(ctx, c, 1)
	require.NoError(t, err)
	require.EqualValues(t, 9, rem)
	require.NoError(t, m.Cancel(ctx, id("x-c")), "Cancel of a hold released by traffic")
	requireLevels(t, ctx, m, c, 9, 0)
	// Sweep first, then Cancel.
	_, err = m.Sweep(ctx)
	require.NoError(t, err)
	requireLevels(t, ctx, m, b, 10, 0)
	for _, name := range []string{"x-a", "x-b", "x-c"} {
		require.NoError(t, m.Cancel(ctx, id(name)), "Cancel of %s, released", name)
		require.ErrorIs(t, m.Confirm(ctx, id(name)), inventory.ErrHoldReleased, "Confirm of %s, released", name)
	}
	_, err = m.Sweep(ctx)
	require.NoError(t, err)
	requireLevels(t, ctx, m, a, 10, 0)
	requireLevels(t, ctx, m, b, 10, 0)
	requireLevels(t, ctx, m, c, 9, 0)
}

func (s *suite) testSweep(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10, 10)
	a, b := sk[0], sk[1]
	require.NoError(t, m.Reserve(ctx, id("live"), lines(a, 1, b, 1), s.longTTL()))
	s.reserveShort(t, ctx, m, id("e1"), lines(a, 2))
	sleepUntil(ctx, s.reserveShort(t, ctx, m, id("e2"), lines(a, 3, b, 4)))
	// The count is not checked: on a shared backend another process's
	// Sweep may have released some of these holds first.
	n, err := m.Sweep(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 0, "Sweep's count")
	t.Logf("Sweep released %d holds", n)
	requireLevels(t, ctx, m, a, 9, 1)
	requireLevels(t, ctx, m, b, 9, 1)
	_, err = m.Sweep(ctx)
	require.NoError(t, err)
	requireLevels(t, ctx, m, a, 9, 1)
	requireLevels(t, ctx, m, b, 9, 1)
	require.ErrorIs(t, m.Confirm(ctx, id("e2")), inventory.ErrHoldReleased)
	require.NoError(t, m.Confirm(ctx, id("live")), "Sweep left the live hold alone")
	requireLevels(t, ctx, m, a, 9, 0)
	requireLevels(t, ctx, m, b, 9, 0)
}

func (s *suite) testReap(t *testing.T, m orderManager) {
	ctx, id, sk := s.start(t, m, 10)
	a := sk[0]
	period := s.cfg.ReapPeriod
	reapCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var mu sync.Mutex
	var sweepErrs []error
	go func() {
		done <- inventory.Reap(reapCtx, m, period, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			sweepErrs = append(sweepErrs, err)
		})
	}()
	t.Cleanup(func() { stop(); <-done }) // leaves no goroutine on failure

	require.NoError(t, m.Reserve(ctx, id("live"), lines(a, 1), s.longTTL()))
	expired := s.reserveShort(t, ctx, m, id("short"), lines(a, 2))
	bound := expired.Add(period + s.cfg.ExpirySlack)
	for {
		held, err := m.Held(ctx, a)
		require.NoError(t, err)
		if held == 1 {
			break
		}
		require.Equal(t, int64(3), held, "held units of %q", a)
		if time.Now().After(bound) {
			t.Fatalf("Reap (period %v) did not release a hold of TTL %v within TTL + ClockResolution %v + period + ExpirySlack %v",
				period, s.cfg.HoldTTL, s.cfg.ClockResolution, s.cfg.ExpirySlack)
		}
		time.Sleep(10 * time.Millisecond)
	}
	requireLevels(t, ctx, m, a, 9, 1)
	stop()
	select {
	case err := <-done:
		done <- err // for the cleanup
		require.ErrorIs(t, err, context.Canceled, "Reap returns ctx.Err() once its ctx is cancelled")
	case <-time.After(s.cfg.ExpirySlack):
		t.Fatalf("Reap did not return within %v of its ctx being cancelled", s.cfg.ExpirySlack)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, sweepErrs, "Sweep failed under Reap")
	require.NoError(t, m.Confirm(ctx, id("live")), "Reap left the live hold alone")
}

func (s *suite) testConcurrentSameHold(t *testing.T, m orderManager) {
	id := func(name string) string { return s.id(t, name) }
	ctx := ctxFor(t, s.cfg.Timeout)
	sk := s.skus(t, ctx, m, 1000, 1000)
	a, b := sk[0], sk[1]
	const n = 100
	var ok, dup atomic.Int64
	var mu sync.Mutex
	var unexpected []error
	odd := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		unexpected = append(unexpected, err)
	}
	start(n, func(i int) {
		err := s.retry(ctx, func() error { return m.Reserve(ctx, id("one-id"), lines(a, 1+int64(i%3), b, 1), s.longTTL()) })
		switch {
		case err == nil:
			ok.Add(1)
		case errors.Is(err, inventory.ErrDuplicate):
			dup.Add(1)
		default:
			odd(err)
		}
	})
	require.Empty(t, unexpected)
	require.EqualValues(t, 1, ok.Load(), "exactly one of %d Reserves with one id takes effect", n)
	require.EqualValues(t, n-1, dup.Load(), "the others report ErrDuplicate")
	heldA, err := m.Held(ctx, a)
	require.NoError(t, err)
	require.Contains(t, []int64{1, 2, 3}, heldA)
	requireLevels(t, ctx, m, a, 1000-heldA, heldA)
	requireLevels(t, ctx, m, b, 999, 1)

	// Confirms and Cancels of the hold race: exactly one kind wins.
	var confirmed, cancelled, confirmDup, confirmReleased, cancelConfirmed atomic.Int64
	start(n, func(i int) {
		if i%2 == 0 {
			err := s.retry(ctx, func() error { return m.Confirm(ctx, id("one-id")) })
			switch {
			case err == nil:
				confirmed.Add(1)
			case errors.Is(err, inventory.ErrDuplicate):
				confirmDup.Add(1)
			case errors.Is(err, inventory.ErrHoldReleased):
				confirmReleased.Add(1)
			default:
				odd(err)
			}
			return
		}
		err := s.retry(ctx, func() error { return m.Cancel(ctx, id("one-id")) })
		switch {
		case err == nil:
			cancelled.Add(1)
		case errors.Is(err, inventory.ErrHoldConfirmed):
			cancelConfirmed.Add(1)
		default:
			odd(err)
		}
	})
	require.Empty(t, unexpected)
	t.Logf("%d Confirms, %d Cancels: %d confirmed, %d duplicate, %d released; %d cancelled, %d refused as confirmed",
		n/2, n/2, confirmed.Load(), confirmDup.Load(), confirmReleased.Load(), cancelled.Load(), cancelConfirmed.Load())
	if confirmed.Load() == 1 {
		require.Zero(t, cancelled.Load(), "a Cancel succeeded beside the Confirm")
		require.EqualValues(t, n/2-1, confirmDup.Load())
		require.EqualValues(t, n/2, cancelConfirmed.Load())
		requireLevels(t, ctx, m, a, 1000-heldA, 0)
		requireLevels(t, ctx, m, b, 999, 0)
	} else {
		require.Zero(t, confirmed.Load(), "more than one Confirm of one hold succeeded")
		require.EqualValues(t, n/2, cancelled.Load(), "once a Cancel won, every Cancel succeeds")
		require.EqualValues(t, n/2, confirmReleased.Load())
		requireLevels(t, ctx, m, a, 1000, 0)
		requireLevels(t, ctx, m, b, 1000, 0)
	}
}

// testConfirmRacesCancel confirms and cancels each of many holds at once,
// as a buyer who pays while the shop gives up on the cart: for every hold
// exactly one of the two succeeds and the other says why (ErrHoldReleased,
// ErrHoldConfirmed). Neither may fail with an error that says nothing
// changed while the other does too, nor report a failure after it took
// effect. The units of the confirmed holds are sold, the others' back.
func (s *suite) testConfirmRacesCancel(t *testing.T, m orderManager) {
	ctx := ctxFor(t, s.cfg.Timeout)
	sk := s.skus(t, ctx, m, 1000, 1000)
	a, b := sk[0], sk[1]
	const n = 100
	id := func(i int) string { return s.id(t, fmt.Sprintf("pair-%d", i)) }
	for i := range n {
		require.NoError(t, s.retry(ctx, func() error { return m.Reserve(ctx, id(i), lines(a, 1, b, 1), s.longTTL()) }))
	}
	errs := make([]error, 2*n) // Confirm of hold i at 2i, Cancel at 2i+1
	start(2*n, func(j int) {
		if j%2 == 0 {
			errs[j] = s.retry(ctx, func() error { return m.Confirm(ctx, id(j/2)) })
		} else {
			errs[j] = s.retry(ctx, func() error { return m.Cancel(ctx, id(j/2)) })
		}
	})
	var confirmed int64
	var problems []string
	for i := range n {
		confirm, cancel := errs[2*i], errs[2*i+1]
		switch {
		case confirm == nil && errors.Is(cancel, inventory.ErrHoldConfirmed):
			confirmed++
		case cancel == nil && errors.Is(confirm, inventory.ErrHoldReleased):
		default:
			problems = append(problems, fmt.Sprintf("hold %d: Confirm: %v; Cancel: %v", i, confirm, cancel))
		}
	}
	t.Logf("%d Confirm-versus-Cancel races: Confirm won %d, Cancel %d", n, confirmed, n-confirmed)
	require.Empty(t, problems, "for every hold, exactly one of Confirm and Cancel succeeds and the other says why")
	requireLevels(t, ctx, m, a, 1000-confirmed, 0)
	requireLevels(t, ctx, m, b, 1000-confirmed, 0)
}

// testConfirmRacesExpiry issues Confirms around the moment their holds
// expire, with a sweeper running, and checks that exactly one of the
// Confirm and the expiry wins each race.
func (s *suite) testConfirmRacesExpiry(t *testing.T, m orderManager) {
	ctx := ctxFor(t, s.cfg.Timeout)
	n := s.cfg.Races
	ttl := s.cfg.HoldTTL
	res := s.cfg.ClockResolution
	skus := make([]string, n)
	for i := range skus {
		skus[i] = s.osku(t, fmt.Sprintf("race-%d", i))
		mustInit(t, ctx, m, skus[i], 1)
	}

	stopSweep := make(chan struct{})
	var sweeps sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	// Three sweepers, as from three processes: each hold is released once.
	for range 3 {
		sweeps.Go(func() {
			for {
				select {
				case <-stopSweep:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if _, err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
					problem("Sweep: %v", err)
				}
			}
		})
	}

	const workers = 20
	confirmed := make([]bool, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				id := s.id(t, fmt.Sprintf("race-%d", i))
				t0 := time.Now() // the TTL starts after this on the backend
				if err := s.retry(ctx, func() error { return m.Reserve(ctx, id, lines(skus[i], 1), ttl) }); err != nil {
					problem("Reserve(%s): %v", id, err)
					return
				}
				reserved := time.Now() // and before this
				// Spread the Confirms from a quarter TTL before the TTL to
				// a quarter TTL after it, plus the clock's resolution.
				spread := ttl/2 + res
				at := t0.Add(ttl - ttl/4 + spread*time.Duration(i%41)/40)
				sleepUntil(ctx, at)
				asked := time.Now()
				err := s.retry(ctx, func() error { return m.Confirm(ctx, id) })
				answered := time.Now()
				// Where the clocks leave no doubt, the right side must win.
				if live := t0.Add(ttl - res - expiryMargin); answered.Before(live) && err != nil {
					problem("race %d: Confirm answered %v after Reserve began, before the TTL %v could pass, with %v",
						i, answered.Sub(t0).Round(time.Millisecond), ttl, err)
				}
				if dead := reserved.Add(s.expiredAfter(ttl)); asked.After(dead) && err == nil {
					problem("race %d: Confirm asked %v after Reserve returned, past the TTL %v, and succeeded",
						i, asked.Sub(reserved).Round(time.Millisecond), ttl)
				}
				switch {
				case err == nil:
					confirmed[i] = true
					if held, err := m.Held(ctx, skus[i]); err != nil || held != 0 {
						problem("race %d: Confirm succeeded, then Held = %d, %v; want 0", i, held, err)
					}
				case errors.Is(err, inventory.ErrHoldReleased):
					// The units are back as soon as Confirm says so.
					if got, err := m.Get(ctx, skus[i]); err != nil || got != 1 {
						problem("race %d: Confirm reported ErrHoldReleased, then Get = %d, %v; want 1", i, got, err)
					}
				default:
					problem("race %d: Confirm: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	close(stopSweep)
	sweeps.Wait()
	require.Empty(t, problems)

	sleepUntil(ctx, time.Now().Add(s.expiredAfter(ttl))) // every hold surely past its TTL
	_, err := m.Sweep(ctx)
	require.NoError(t, err)
	wins := 0
	for i, sku := range skus {
		want := int64(1)
		if confirmed[i] {
			want, wins = 0, wins+1
		}
		// Exactly one of {Confirm succeeded, the unit came back}.
		requireLevels(t, ctx, m, sku, want, 0)
		err := m.Cancel(ctx, s.id(t, fmt.Sprintf("race-%d", i)))
		if confirmed[i] {
			require.ErrorIs(t, err, inventory.ErrHoldConfirmed, "race %d", i)
		} else {
			require.NoError(t, err, "race %d", i)
		}
		requireStock(t, ctx, m, sku, want)
	}
	t.Logf("%d Confirm-versus-expiry races (TTL %v): Confirm won %d, expiry won %d", n, ttl, wins, n-wins)
}

// testCarts runs Carts concurrent carts over ten SKUs and checks the
// invariant initial - available == sold - returned + held on each.
func (s *suite) testCarts(t *testing.T, m orderManager) {
	ctx := ctxFor(t, s.cfg.Timeout)
	const nSKU, initial = 10, 400
	skus := make([]string, nSKU)
	for i := range skus {
		skus[i] = s.osku(t, fmt.Sprintf("sku-%d", i))
		mustInit(t, ctx, m, skus[i], initial)
	}
	var sold, returned [nSKU]atomic.Int64
	const (
		kindReduce = iota
		kindConfirm
		kindCancel
		kindAbandon
		kindReturn
		kinds
	)
	kindNames := [kinds]string{"ReduceLines", "Reserve+Confirm", "Reserve+Cancel", "Reserve+abandon", "ReturnLines"}
	var okCount, refused [kinds]atomic.Int64
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var abandoned []string

	// A sampler watches for negative levels while the buyers run, and a
	// sweeper releases expired holds among the buyers' calls.
	stop := make(chan struct{})
	var samplers sync.WaitGroup
	samplers.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			if _, err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
				problem("Sweep while the carts ran: %v", err)
			}
		}
	})
	samplers.Go(func() {
		for {
			for _, sku := range skus {
				select {
				case <-stop:
					return
				default:
				}
				if n, err := m.Get(ctx, sku); err != nil || n < 0 {
					problem("Get(%q) = %d, %v while the carts ran", sku, n, err)
				}
				if n, err := m.Held(ctx, sku); err != nil || n < 0 {
					problem("Held(%q) = %d, %v while the carts ran", sku, n, err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	buyers := s.cfg.Carts
	elapsed := start(buyers, func(i int) {
		rng := mrand.New(mrand.NewPCG(uint64(i), 11))
		perm := rng.Perm(nSKU)[:1+rng.IntN(5)]
		cart := make([]inventory.Line, len(perm))
		for j, k := range perm {
			cart[j] = inventory.Line{SKU: skus[k], Qty: 1 + rng.Int64N(3)}
		}
		add := func(to *[nSKU]atomic.Int64) {
			for j, k := range perm {
				to[k].Add(cart[j].Qty)
			}
		}
		kind := i % kinds
		refusal := func(what string, err error) bool {
			if !errors.Is(err, inventory.ErrInsufficientStock) {
				problem("buyer %d: %s: %v", i, what, err)
				return false
			}
			var ie *inventory.InsufficientError
			if !errors.As(err, &ie) || len(ie.Short) == 0 {
				problem("buyer %d: %s: %v is not an *InsufficientError naming a line", i, what, err)
			}
			refused[kind].Add(1)
			return true
		}
		id := s.id(t, fmt.Sprintf("buyer-%d", i))
		switch kind {
		case kindReduce, kindReturn:
			var opts []inventory.Option
			if i%2 == 0 {
				opts = append(opts, inventory.WithKey(id))
			}
			call := m.ReduceLines
			if kind == kindReturn {
				call = m.ReturnLines
			}
			err := s.retry(ctx, func() error { return call(ctx, cart, opts...) })
			if err != nil {
				refusal(kindNames[kind], err)
				return
			}
			okCount[kind].Add(1)
			if kind == kindReduce {
				add(&sold)
			} else {
				add(&returned)
			}
			if len(opts) > 0 {
				// A retry with the same key changes nothing.
				err := s.retry(ctx, func() error { return call(ctx, cart, opts...) })
				if !errors.Is(err, inventory.ErrDuplicate) {
					problem("buyer %d: repeated %s with its key: %v, want ErrDuplicate", i, kindNames[kind], err)
					if err == nil {
						if kind == kindReduce {
							add(&sold)
						} else {
							add(&returned)
						}
					}
				}
			}
		default:
			ttl := s.longTTL()
			if kind == kindAbandon {
				// Half the abandoned holds expire while the carts run, for
				// the later calls on their SKUs to release.
				ttl = s.cfg.HoldTTL
				if rng.IntN(2) == 0 {
					ttl = max(inventory.MinHoldTTL, s.cfg.HoldTTL/100)
				}
			}
			if err := s.retry(ctx, func() error { return m.Reserve(ctx, id, cart, ttl) }); err != nil {
				refusal(kindNames[kind], err)
				return
			}
			switch kind {
			case kindAbandon:
				mu.Lock()
				abandoned = append(abandoned, id)
				mu.Unlock()
				okCount[kind].Add(1)
			case kindConfirm:
				err := s.retry(ctx, func() error { return m.Confirm(ctx, id) })
				if err != nil {
					problem("buyer %d: Confirm of a live hold: %v", i, err)
					return
				}
				okCount[kind].Add(1)
				add(&sold)
			case kindCancel:
				if err := s.retry(ctx, func() error { return m.Cancel(ctx, id) }); err != nil {
					problem("buyer %d: Cancel of a live hold: %v", i, err)
					return
				}
				okCount[kind].Add(1)
			}
		}
	})
	expired := time.Now().Add(s.expiredAfter(s.cfg.HoldTTL)) // every abandoned hold past its TTL
	close(stop)
	samplers.Wait()
	var summary []string
	for k := range kinds {
		summary = append(summary, fmt.Sprintf("%s %d ok %d refused", kindNames[k], okCount[k].Load(), refused[k].Load()))
	}
	t.Logf("%d carts over %d SKUs in %v: %s", buyers, nSKU, elapsed.Round(time.Millisecond), strings.Join(summary, ", "))
	require.Empty(t, problems)

	// levels reads available and held units of sku at one moment: held
	// only falls now (releases), so equal readings around Get bracket it.
	levels := func(sku string) (avail, held int64) {
		t.Helper()
		for {
			h1, err := m.Held(ctx, sku)
			require.NoError(t, err)
			avail, err = m.Get(ctx, sku)
			require.NoError(t, err)
			h2, err := m.Held(ctx, sku)
			require.NoError(t, err)
			if h1 == h2 {
				return avail, h1
			}
		}
	}
	check := func(when string, wantHeldZero bool) {
		t.Helper()
		for k, sku := range skus {
			avail, held := levels(sku)
			assert.GreaterOrEqual(t, avail, int64(0), "%s: SKU %d below zero", when, k)
			assert.GreaterOrEqual(t, held, int64(0), "%s: SKU %d holds a negative count", when, k)
			if wantHeldZero {
				assert.Zero(t, held, "%s: SKU %d still holds units", when, k)
			}
			assert.Equal(t, sold[k].Load()-returned[k].Load()+held, initial-avail,
				"%s: SKU %d: initial - available == sold - returned + held (sold %d, returned %d, held %d, available %d)",
				when, k, sold[k].Load(), returned[k].Load(), held, avail)
		}
	}
	check("after the carts", false)
	if t.Failed() {
		return
	}

	// The abandoned holds expire; Sweep releases what traffic has not.
	sleepUntil(ctx, expired)
	start(4, func(int) { // concurrent sweeps release each hold once
		if _, err := m.Sweep(ctx); err != nil {
			problem("Sweep: %v", err)
		}
	})
	require.Empty(t, problems)
	check("after the sweep", true)
	if t.Failed() {
		return
	}
	// Cancelling the expired holds gives nothing back twice.
	var cancelErrs atomic.Int64
	start(len(abandoned), func(i int) {
		if err := s.retry(ctx, func() error { return m.Cancel(ctx, abandoned[i]) }); err != nil {
			if cancelErrs.Add(1) == 1 {
				problem("Cancel(%s) of an expired hold: %v", abandoned[i], err)
			}
		}
	})
	require.Empty(t, problems)
	check("after cancelling the expired holds", true)
}
