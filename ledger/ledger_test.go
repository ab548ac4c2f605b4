package ledger_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
)

// history is a SKU's entries as a Reader would give them.
func history() []ledger.Entry {
	return []ledger.Entry{
		{SKU: "a", Pos: 1, Kind: ledger.Init, Units: 10, After: ledger.Stock{Available: 10}},
		{SKU: "a", Pos: 3, Kind: ledger.Reduce, Units: 2, After: ledger.Stock{Available: 8, Sold: 2}},
		{SKU: "a", Pos: 4, Kind: ledger.Reserve, Units: 3, After: ledger.Stock{Available: 5, Held: 3, Sold: 2}},
		{SKU: "a", Pos: 9, Kind: ledger.Confirm, Units: 1, After: ledger.Stock{Available: 5, Held: 2, Sold: 3}},
		{SKU: "a", Pos: 10, Kind: ledger.Expire, Units: 2, After: ledger.Stock{Available: 7, Sold: 3}},
		{SKU: "a", Pos: 12, Kind: ledger.Return, Units: 1, After: ledger.Stock{Available: 8, Sold: 2}},
	}
}

func seq(es []ledger.Entry) func(func(ledger.Entry, error) bool) {
	return func(yield func(ledger.Entry, error) bool) {
		for _, e := range es {
			if !yield(e, nil) {
				return
			}
		}
	}
}

func TestReplay(t *testing.T) {
	s, err := ledger.Replay(seq(history()))
	require.NoError(t, err)
	require.Equal(t, ledger.Stock{Available: 8, Sold: 2}, s)

	for name, broken := range map[string]func([]ledger.Entry){
		"missing move":     func(es []ledger.Entry) { es[2].After.Available = 4 }, // a unit left without an entry
		"position back":    func(es []ledger.Entry) { es[3].Pos = 4 },
		"no units":         func(es []ledger.Entry) { es[1].Units, es[1].After = 0, es[0].After },
		"unknown kind":     func(es []ledger.Entry) { es[1].Kind = "steal" },
		"held not counted": func(es []ledger.Entry) { es[4].After.Held = 2 },
	} {
		es := history()
		broken(es)
		_, err := ledger.Replay(seq(es))
		require.Error(t, err, name)
	}
}

// pages is a Reader over entries, a page at a time.
type pages struct {
	es    []ledger.Entry
	calls int
}

func (p *pages) Entries(_ context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	p.calls++
	if err := ledger.CheckPage(after, limit); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(p.es, func(e ledger.Entry) bool { return e.Pos > after })
	if i < 0 {
		return nil, nil
	}
	return p.es[i:min(len(p.es), i+limit)], nil
}

func TestHistory(t *testing.T) {
	var es []ledger.Entry
	for i := range 2*ledger.MaxPage + 3 {
		es = append(es, ledger.Entry{SKU: "a", Pos: int64(2*i + 1), Kind: ledger.Return, Units: 1})
	}
	p := &pages{es: es}
	var got []ledger.Entry
	for e, err := range ledger.History(context.Background(), p, "a", 0) {
		require.NoError(t, err)
		got = append(got, e)
	}
	require.Equal(t, es, got)
	require.Equal(t, 3, p.calls, "three pages")

	got = got[:0]
	for e, err := range ledger.History(context.Background(), p, "a", es[ledger.MaxPage].Pos) {
		require.NoError(t, err)
		got = append(got, e)
		if len(got) == 2 {
			break // the iterator stops when asked
		}
	}
	require.Equal(t, es[ledger.MaxPage+1:ledger.MaxPage+3], got)

	boom := errors.New("boom")
	for _, err := range ledger.History(context.Background(), failing{boom}, "a", 0) {
		require.ErrorIs(t, err, boom)
	}
}

type failing struct{ err error }

func (f failing) Entries(context.Context, string, int64, int) ([]ledger.Entry, error) {
	return nil, f.err
}

func TestCheckPage(t *testing.T) {
	require.NoError(t, ledger.CheckPage(0, 1))
	require.NoError(t, ledger.CheckPage(5, ledger.MaxPage))
	for _, c := range [][2]int64{{0, 0}, {0, ledger.MaxPage + 1}, {-1, 1}} {
		require.ErrorIs(t, ledger.CheckPage(c[0], int(c[1])), inventory.ErrInvalidArgument)
	}
}
