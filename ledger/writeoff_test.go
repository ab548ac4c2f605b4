package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/ledger"
)

// writtenOff is a history with write-offs: a backend lost a hold of 2 and
// 3 units on sale, then the last 3.
func writtenOff() []ledger.Entry {
	why := "lost with the backend's state"
	return []ledger.Entry{
		{SKU: "w", Pos: 1, Kind: ledger.Init, Units: 10, After: ledger.Stock{Available: 10}},
		{SKU: "w", Pos: 2, Kind: ledger.Reserve, Units: 2, After: ledger.Stock{Available: 8, Held: 2}, Hold: "h"},
		{SKU: "w", Pos: 3, Kind: ledger.Reduce, Units: 2, After: ledger.Stock{Available: 6, Held: 2, Sold: 2}},
		{SKU: "w", Pos: 4, Kind: ledger.LostHeld, Units: 2, After: ledger.Stock{Available: 6, Sold: 2}, Ref: why},
		{SKU: "w", Pos: 5, Kind: ledger.Lost, Units: 3, After: ledger.Stock{Available: 3, Sold: 2}, Ref: why},
		{SKU: "w", Pos: 6, Kind: ledger.Lost, Units: 3, After: ledger.Stock{Sold: 2}, Ref: why},
	}
}

// TestWriteOffReplay: Lost takes units off Available, LostHeld off Held,
// neither counts as sold, and a write-off that does not add up fails the
// replay as a move would.
func TestWriteOffReplay(t *testing.T) {
	s, err := ledger.Replay(seq(writtenOff()))
	require.NoError(t, err)
	require.Equal(t, ledger.Stock{Sold: 2}, s)

	for name, broken := range map[string]func([]ledger.Entry){
		"lost from held":      func(es []ledger.Entry) { es[4].After = ledger.Stock{Available: 6, Held: -3, Sold: 2} },
		"held lost from sale": func(es []ledger.Entry) { es[3].After = ledger.Stock{Available: 4, Held: 2, Sold: 2} },
		"lost counted sold":   func(es []ledger.Entry) { es[5].After.Sold = 5 },
		"no units":            func(es []ledger.Entry) { es[5].Units = 0 },
	} {
		es := writtenOff()
		broken(es)
		_, err := ledger.Replay(seq(es))
		require.Error(t, err, name)
	}

	for _, k := range []ledger.Kind{ledger.Lost, ledger.LostHeld} {
		require.True(t, k.WrittenOff(), k)
	}
	for _, k := range []ledger.Kind{ledger.Init, ledger.Reduce, ledger.Return, ledger.Reserve, ledger.Confirm, ledger.Cancel, ledger.Expire} {
		require.False(t, k.WrittenOff(), k)
	}
}

// TestWriteOffEvents: a write-off says the stock before it, so its events
// follow from the entry alone: the last units lost sell the SKU out, and
// held units lost cross nothing.
func TestWriteOffEvents(t *testing.T) {
	es := writtenOff()
	var kinds []ledger.EventKind
	var c ledger.Cursor
	for _, e := range es {
		before, known := c.Before(e)
		if e.Kind != ledger.Init {
			require.True(t, known, "%+v", e)
			require.Equal(t, c.Available, before, "%+v", e)
		}
		for _, ev := range ledger.Derive(c, e, 5) {
			kinds = append(kinds, ev.Kind)
			require.Equal(t, e.Pos, ev.Entry.Pos)
		}
		c = ledger.Cursor{Pos: e.Pos, Available: e.After.Available}
	}
	require.Equal(t, []ledger.EventKind{ledger.BelowThreshold, ledger.SoldOut}, kinds,
		"below 5 at the first loss (6 to 3), sold out at the second")
}
