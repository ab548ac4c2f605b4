package tiered

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
)

// TestHoldsReachSQL checks that every hold move is journaled and synced:
// once drained, SQL's figures of each SKU satisfy
// initial - available == sold - returned + held, with held as Redis has
// it, and Reconcile finds nothing to repair.
func TestHoldsReachSQL(t *testing.T) {
	onEngines(t, testenv.Redis(t), func(ctx context.Context, t *testing.T, e *env) {
		m := e.manager(t, WithChunk(7), WithLowWater(2))
		const initial = 50
		a, b := "a", "b {x}"
		for _, sku := range []string{a, b} {
			require.NoError(t, m.Init(ctx, sku, initial))
		}
		line := func(sku string, q int64) inventory.Line { return inventory.Line{SKU: sku, Qty: q} }
		require.NoError(t, m.Reserve(ctx, "confirmed", []inventory.Line{line(a, 3), line(b, 4)}, time.Minute))
		require.NoError(t, m.Confirm(ctx, "confirmed"))
		require.NoError(t, m.Reserve(ctx, "cancelled", []inventory.Line{line(a, 5), line(b, 1)}, time.Minute))
		require.NoError(t, m.Cancel(ctx, "cancelled"))
		require.NoError(t, m.Reserve(ctx, "expired", []inventory.Line{line(a, 2)}, 50*time.Millisecond))
		require.NoError(t, m.Reserve(ctx, "live", []inventory.Line{line(a, 6), line(b, 9)}, time.Minute))
		require.NoError(t, m.ReduceLines(ctx, []inventory.Line{line(a, 1), line(b, 2)}))
		require.NoError(t, m.ReturnLines(ctx, []inventory.Line{line(a, 1), line(b, 1)}))
		time.Sleep(100 * time.Millisecond)
		_, err := m.Sweep(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Drain(ctx))

		for _, c := range []struct {
			sku                  string
			sold, returned, held int64
		}{{a, 3 + 1, 1, 6}, {b, 4 + 2, 1, 9}} {
			s := m.totals(ctx, t, c.sku)
			var held, gen int64
			require.NoError(t, m.db.QueryRowxContext(ctx, m.q.held, c.sku).Scan(&held, &gen))
			assert.Equal(t, c.sold, s.sold, "%s: sold in SQL", c.sku)
			assert.Equal(t, c.returned, s.returned, "%s: returned in SQL", c.sku)
			assert.Equal(t, c.held, held, "%s: held in SQL", c.sku)
			got, err := m.Held(ctx, c.sku)
			require.NoError(t, err)
			assert.Equal(t, held, got, "%s: SQL's held units are Redis's", c.sku)
			avail, err := m.Get(ctx, c.sku)
			require.NoError(t, err)
			assert.Equal(t, int64(initial)-avail, s.sold-s.returned+held, "%s: initial - available == sold - returned + held in SQL", c.sku)
			assert.Equal(t, s.granted-s.sold+s.returned-held-s.lost, s.allot, "%s: allotment == granted - net sales - held", c.sku)
		}
		drifts, err := m.Reconcile(ctx, a, b)
		require.NoError(t, err)
		for _, d := range drifts {
			assert.True(t, d.Clean(), "Reconcile after holds: %+v", d)
		}
	})
}

// TestGrantAfterStaleID makes grants with the last grant id a caller saw
// before an Init (an older generation's): the second finds a grant of the
// new generation Redis has not applied, and used to fail with "grant 2
// follows 0", an error outside the contract. Now it applies both.
func TestGrantAfterStaleID(t *testing.T) {
	e := newEnv(t, testenv.Redis(t), testenv.SQLite(t))
	m := e.manager(t, WithChunk(10))
	ctx := ctxT(t, time.Minute)
	const sku = "a"
	require.NoError(t, m.Init(ctx, sku, 100))
	_, err := m.grant(ctx, sku, 0, 0)
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, sku, 100)) // Redis: generation 2, no grant applied
	for range 2 {
		_, err := m.grant(ctx, sku, 0, 1) // the id seen in generation 1
		require.NoError(t, err)
	}
	s := m.totals(ctx, t, sku)
	assert.EqualValues(t, 2, s.g, "Redis applied both grants of generation 2")
	assert.EqualValues(t, 20, s.allot)
	n, err := m.Get(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 100, n)
}

// TestReserveTakesOverCutReserve cuts a Reserve after it made its record
// and held its first line (as a fault would), then retries it: the retry
// takes the record over (a new incarnation), gives back what the cut
// attempt held and holds the lines once, and the cut attempt's late steps
// on its record fail. The ledger shows the cut attempt's hold, its give
// back, and the retry's hold. A retry with other lines says ErrDuplicate.
func TestReserveTakesOverCutReserve(t *testing.T) {
	e := newEnv(t, testenv.Redis(t), testenv.SQLite(t))
	m := e.manager(t, WithLedger())
	ctx := ctxT(t, time.Minute)
	require.NoError(t, m.CreateTables(ctx))
	a, b := "a", "b {x}"
	for _, sku := range []string{a, b} {
		require.NoError(t, m.Init(ctx, sku, 10))
	}
	lines := []inventory.Line{{SKU: a, Qty: 2}, {SKU: b, Qty: 3}}

	cut := m.newRecord(kindHold, "o1")
	ok, err := m.begin(ctx, cut, lines, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, m.holdLine(ctx, lines[0], cut)) // then the fault struck

	err = m.Reserve(ctx, "o1", []inventory.Line{{SKU: a, Qty: 1}}, time.Minute)
	require.ErrorIs(t, err, inventory.ErrDuplicate, "a retry with other lines")
	require.NoError(t, m.Reserve(ctx, "o1", lines, time.Minute), "the retry takes the cut Reserve over")
	for _, l := range lines {
		held, err := m.Held(ctx, l.SKU)
		require.NoError(t, err)
		assert.Equal(t, l.Qty, held, "%s: held once", l.SKU)
		n, err := m.Get(ctx, l.SKU)
		require.NoError(t, err)
		assert.Equal(t, 10-l.Qty, n, "%s: available", l.SKU)
	}
	_, moved, err := m.to(ctx, cut, []string{stReserving}, stHeld, 0)
	require.NoError(t, err)
	assert.False(t, moved, "the cut attempt's step on the record it no longer owns")
	require.NoError(t, m.holdLine(ctx, lines[1], cut)) // a late hold of the cut attempt...
	held, err := m.Held(ctx, b)
	require.NoError(t, err)
	assert.Equal(t, int64(3+3), held, "...holds under the old incarnation, which the retry does not own")

	require.NoError(t, m.Confirm(ctx, "o1"))
	var kinds []ledger.Kind
	for e, err := range ledger.History(ctx, m, a, 0) {
		require.NoError(t, err)
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []ledger.Kind{ledger.Init, ledger.Reserve, ledger.Expire, ledger.Reserve, ledger.Confirm}, kinds, "%s's history", a)
}

// TestConfirmOfUnfinishedReserve confirms a hold whose Reserve made its
// record and was cut before it finished (and was not retried): before the
// hold's deadline the Reserve may still run (ErrContention); after it, the
// hold ran out (ErrHoldReleased), and what the cut attempt held is back.
func TestConfirmOfUnfinishedReserve(t *testing.T) {
	e := newEnv(t, testenv.Redis(t), testenv.SQLite(t))
	m := e.manager(t)
	ctx := ctxT(t, time.Minute)
	require.NoError(t, m.Init(ctx, "a", 10))
	line := inventory.Line{SKU: "a", Qty: 4}
	cut := m.newRecord(kindHold, "o1")
	ok, err := m.begin(ctx, cut, []inventory.Line{line}, 300*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, m.holdLine(ctx, line, cut))

	require.ErrorIs(t, m.Confirm(ctx, "o1"), inventory.ErrContention, "before the deadline")
	time.Sleep(400 * time.Millisecond)
	require.ErrorIs(t, m.Confirm(ctx, "o1"), inventory.ErrHoldReleased, "after the deadline")
	require.ErrorIs(t, m.Confirm(ctx, "o1"), inventory.ErrHoldReleased, "again")
	n, err := m.Get(ctx, "a")
	require.NoError(t, err)
	assert.EqualValues(t, 10, n)
	held, err := m.Held(ctx, "a")
	require.NoError(t, err)
	assert.Zero(t, held)
}

// TestCancelRacingTakeOver runs a Cancel beside the retry of a Reserve
// that was cut after it made its record and held its first line, round
// after round: whichever wins, a Cancel that says nil leaves nothing
// held, even when the retry took the record over (a new incarnation)
// between the Cancel's read of it and its move.
func TestCancelRacingTakeOver(t *testing.T) {
	e := newEnv(t, testenv.Redis(t), testenv.SQLite(t))
	m := e.manager(t)
	ctx := ctxT(t, time.Minute)
	lines := []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b {x}", Qty: 1}}
	for _, l := range lines {
		require.NoError(t, m.Init(ctx, l.SKU, 1000))
	}
	for i := range 150 {
		id := fmt.Sprint("o", i)
		cut := m.newRecord(kindHold, id)
		ok, err := m.begin(ctx, cut, lines, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, m.holdLine(ctx, lines[0], cut))
		var reserveErr, cancelErr error
		var wg sync.WaitGroup
		wg.Go(func() { reserveErr = m.Reserve(ctx, id, lines, time.Minute) })
		wg.Go(func() { cancelErr = m.Cancel(ctx, id) })
		wg.Wait()
		if cancelErr != nil {
			require.ErrorIs(t, cancelErr, inventory.ErrContention, "round %d", i)
			require.NoError(t, m.Cancel(ctx, id), "round %d: the Cancel again", i)
		}
		if reserveErr != nil {
			require.True(t, errors.Is(reserveErr, inventory.ErrContention) || errors.Is(reserveErr, inventory.ErrDuplicate),
				"round %d: %v", i, reserveErr)
		}
		for _, l := range lines {
			held, err := m.Held(ctx, l.SKU)
			require.NoError(t, err)
			require.Zero(t, held, "round %d: %s held after a Cancel that said nil (the Reserve: %v)", i, l.SKU, reserveErr)
		}
	}
}
