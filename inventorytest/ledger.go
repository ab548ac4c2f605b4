package inventorytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
)

// ledgerManager is what the ledger subtests need.
type ledgerManager interface {
	inventory.StockManager
	ledger.Reader
}

// RunLedger runs only the ledger subtests of [Run], under "Ledger/", as
// Run does with Config.RequireLedger set: for a strategy whose other
// subtests run elsewhere with the ledger off, and which proves with this
// that the ledger it keeps when asked is right.
func RunLedger(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.NewManager == nil {
		t.Fatal("inventorytest: Config.NewManager is nil")
	}
	cfg.defaults()
	cfg.RequireLedger = true
	(&suite{cfg: cfg, prefix: randomPrefix()}).runLedger(t)
}

// runLedger runs the ledger subtests, under "Ledger/", if the manager
// keeps a movement ledger: it implements [ledger.Reader] and its Entries
// does not fail with [ledger.ErrNotKept].
func (s *suite) runLedger(t *testing.T) {
	t.Helper()
	probe := s.cfg.NewManager(t)
	keeps := false
	if r, ok := probe.(ledger.Reader); ok {
		_, err := r.Entries(quick(t), s.sku(t, "ledger-probe"), 0, 1)
		if err != nil && !errors.Is(err, ledger.ErrNotKept) {
			t.Fatalf("inventorytest: %T: Entries of a SKU never moved: %v", probe, err)
		}
		keeps = err == nil
	}
	if !keeps {
		if s.cfg.RequireLedger {
			t.Errorf("inventorytest: Config.RequireLedger is set, but %T keeps no movement ledger (ledger.Reader, ErrNotKept)", probe)
		}
		return
	}
	t.Run("Ledger", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			fn   func(*testing.T, ledgerManager)
		}{
			{"Entries", s.testLedgerEntries},
			{"Pages", s.testLedgerPages},
			{"InvalidArguments", s.testLedgerInvalid},
			{"Holds", s.testLedgerHolds},
			{"Concurrent", s.testLedgerConcurrent},
		} {
			t.Run(tc.name, func(t *testing.T) {
				m, ok := s.cfg.NewManager(t).(ledgerManager)
				if !ok {
					t.Fatal("inventorytest: NewManager returned a manager without a ledger after one that kept one")
				}
				tc.fn(t, m)
			})
		}
	})
}

// entries reads the whole history of sku.
func entries(t *testing.T, ctx context.Context, r ledger.Reader, sku string) []ledger.Entry {
	t.Helper()
	var out []ledger.Entry
	for e, err := range ledger.History(ctx, r, sku, 0) {
		require.NoError(t, err, "ledger history of %q", sku)
		out = append(out, e)
	}
	return out
}

// want is an entry as a subtest expects it: what the backend does not
// choose (its position and time) left out.
type want struct {
	Kind           ledger.Kind
	Units          int64
	After          ledger.Stock
	Key, Ref, Hold string
}

func wants(es []ledger.Entry) []want {
	out := make([]want, len(es))
	for i, e := range es {
		out[i] = want{e.Kind, e.Units, e.After, e.Key, e.Ref, e.Hold}
	}
	return out
}

// checkLedger replays sku's history and compares it with what m reads
// back, and checks that each entry's time is set.
func checkLedger(t *testing.T, ctx context.Context, m ledgerManager, sku string) ledger.Stock {
	t.Helper()
	st, err := ledger.Check(ctx, m, m, sku)
	require.NoError(t, err, "replay of %q", sku)
	for _, e := range entries(t, ctx, m, sku) {
		require.Equal(t, sku, e.SKU)
		require.False(t, e.Time.IsZero(), "entry %d of %q has no time", e.Pos, sku)
		// The backend's clock, not the client's: only a gross error is caught.
		require.WithinDuration(t, time.Now(), e.Time, 24*time.Hour, "time of entry %d of %q", e.Pos, sku)
	}
	return st
}

// testLedgerEntries: each call that took effect is one entry, with its
// key and reference; refusals and duplicates are none.
func (s *suite) testLedgerEntries(t *testing.T, m ledgerManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 10)
	_, err := m.Reduce(ctx, sku, 3, inventory.WithKey("k1"), inventory.WithRef("order 1"))
	require.NoError(t, err)
	_, err = m.Reduce(ctx, sku, 3, inventory.WithKey("k1"), inventory.WithRef("order 1 again"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	_, err = m.Reduce(ctx, sku, 100, inventory.WithRef("too many"))
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Return(ctx, sku, 2, inventory.WithRef("退货 #7"))
	require.NoError(t, err)
	_, err = m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	mustInit(t, ctx, m, sku, 20)
	require.Equal(t, []want{
		{Kind: ledger.Init, Units: 10, After: ledger.Stock{Available: 10}},
		{Kind: ledger.Reduce, Units: 3, After: ledger.Stock{Available: 7, Sold: 3}, Key: "k1", Ref: "order 1"},
		{Kind: ledger.Return, Units: 2, After: ledger.Stock{Available: 9, Sold: 1}, Ref: "退货 #7"},
		{Kind: ledger.Reduce, Units: 1, After: ledger.Stock{Available: 8, Sold: 2}},
		{Kind: ledger.Init, Units: 20, After: ledger.Stock{Available: 20, Sold: 2}},
	}, wants(entries(t, ctx, m, sku)))
	checkLedger(t, ctx, m, sku)
	require.Empty(t, entries(t, ctx, m, s.sku(t, "never-moved")), "a SKU never moved has no entries")
}

// testLedgerPages reads a history a page at a time from each cursor.
func (s *suite) testLedgerPages(t *testing.T, m ledgerManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 100)
	for i := range 6 {
		_, err := m.Reduce(ctx, sku, int64(i+1))
		require.NoError(t, err)
	}
	all := entries(t, ctx, m, sku)
	require.Len(t, all, 7)
	for i := 1; i < len(all); i++ {
		require.Greater(t, all[i].Pos, all[i-1].Pos, "positions grow along the history")
	}
	for limit := 1; limit <= 4; limit++ {
		var got []ledger.Entry
		after := int64(0)
		for {
			page, err := m.Entries(ctx, sku, after, limit)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), limit)
			got = append(got, page...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].Pos
		}
		require.Equal(t, all, got, "pages of %d", limit)
	}
	// From the middle: the counters carry on from the entries before.
	rest, err := m.Entries(ctx, sku, all[3].Pos, ledger.MaxPage)
	require.NoError(t, err)
	require.Equal(t, all[4:], rest)
}

func (s *suite) testLedgerInvalid(t *testing.T, m ledgerManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 10)
	for _, c := range []struct {
		sku   string
		after int64
		limit int
	}{{sku, 0, 0}, {sku, 0, ledger.MaxPage + 1}, {sku, -1, 1}, {"", 0, 1}, {"a\nb", 0, 1}} {
		_, err := m.Entries(ctx, c.sku, c.after, c.limit)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "Entries(%q, %d, %d)", c.sku, c.after, c.limit)
	}
	for _, ref := range []string{"", "a\x00b", string([]byte{0xff}), strings256()} {
		_, err := m.Reduce(ctx, sku, 1, inventory.WithRef(ref))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "WithRef(%q)", ref)
	}
	requireStock(t, ctx, m, sku, 10)
	require.Len(t, entries(t, ctx, m, sku), 1, "refused calls record nothing")
}

func strings256() string { return string(slices.Repeat([]byte{'r'}, inventory.MaxSKULen+1)) }

// testLedgerHolds: the lines calls and the life of holds, entry by entry.
func (s *suite) testLedgerHolds(t *testing.T, lm ledgerManager) {
	m, ok := lm.(orderManager)
	if !ok {
		t.Skip("inventorytest: the manager is not an inventory.OrderManager")
	}
	ctx, id, skus := s.start(t, m, 10, 5)
	a, b := skus[0], skus[1]
	require.NoError(t, m.ReduceLines(ctx, lines(a, 2, b, 1), inventory.WithKey(id("kl")), inventory.WithRef("cart 1")))
	require.NoError(t, m.Reserve(ctx, id("h1"), lines(a, 3, b, 1), s.longTTL()))
	require.NoError(t, m.Confirm(ctx, id("h1")))
	require.NoError(t, m.Reserve(ctx, id("h2"), lines(a, 1), s.longTTL()))
	require.NoError(t, m.Cancel(ctx, id("h2")))
	require.NoError(t, m.ReturnLines(ctx, lines(a, 1), inventory.WithRef("refund")))
	expired := s.reserveShort(t, ctx, m, id("h3"), lines(b, 2))
	sleepUntil(ctx, expired)
	require.NoError(t, s.retry(ctx, func() error {
		if _, err := m.Sweep(ctx); err != nil {
			return err
		}
		if held, err := m.Held(ctx, b); err != nil || held != 0 {
			return fmt.Errorf("%w: %d still held (%v)", inventory.ErrContention, held, err) // swept by another, or not yet
		}
		return nil
	}))
	require.Equal(t, []want{
		{Kind: ledger.Init, Units: 10, After: ledger.Stock{Available: 10}},
		{Kind: ledger.Reduce, Units: 2, After: ledger.Stock{Available: 8, Sold: 2}, Key: id("kl"), Ref: "cart 1"},
		{Kind: ledger.Reserve, Units: 3, After: ledger.Stock{Available: 5, Held: 3, Sold: 2}, Hold: id("h1")},
		{Kind: ledger.Confirm, Units: 3, After: ledger.Stock{Available: 5, Sold: 5}, Hold: id("h1")},
		{Kind: ledger.Reserve, Units: 1, After: ledger.Stock{Available: 4, Held: 1, Sold: 5}, Hold: id("h2")},
		{Kind: ledger.Cancel, Units: 1, After: ledger.Stock{Available: 5, Sold: 5}, Hold: id("h2")},
		{Kind: ledger.Return, Units: 1, After: ledger.Stock{Available: 6, Sold: 4}, Ref: "refund"},
	}, wants(entries(t, ctx, lm, a)))
	require.Equal(t, []want{
		{Kind: ledger.Init, Units: 5, After: ledger.Stock{Available: 5}},
		{Kind: ledger.Reduce, Units: 1, After: ledger.Stock{Available: 4, Sold: 1}, Key: id("kl"), Ref: "cart 1"},
		{Kind: ledger.Reserve, Units: 1, After: ledger.Stock{Available: 3, Held: 1, Sold: 1}, Hold: id("h1")},
		{Kind: ledger.Confirm, Units: 1, After: ledger.Stock{Available: 3, Sold: 2}, Hold: id("h1")},
		{Kind: ledger.Reserve, Units: 2, After: ledger.Stock{Available: 1, Held: 2, Sold: 2}, Hold: id("h3")},
		{Kind: ledger.Expire, Units: 2, After: ledger.Stock{Available: 3, Sold: 2}, Hold: id("h3")},
	}, wants(entries(t, ctx, lm, b)))
	checkLedger(t, ctx, lm, a)
	checkLedger(t, ctx, lm, b)
	// From the middle, with a hold out: Held and Sold carry on.
	all := entries(t, ctx, lm, a)
	rest, err := lm.Entries(ctx, a, all[2].Pos, ledger.MaxPage)
	require.NoError(t, err)
	require.Equal(t, all[3:], rest)
}

// ledgerCall is one call of testLedgerConcurrent that took effect: the
// entry it must have, found by its reference.
type ledgerCall struct {
	sku       string
	kind      ledger.Kind
	units     int64
	key, hold string
}

// testLedgerConcurrent: buyers race on a few SKUs with Reduces and Returns,
// keyed and retried with the same key, unkeyed, and (on an OrderManager)
// holds confirmed or cancelled. Each call attempt has a reference of its
// own: every attempt that took effect has exactly one entry, no other
// attempt has one, and each SKU's history replays to the stock read back.
func (s *suite) testLedgerConcurrent(t *testing.T, m ledgerManager) {
	ctx, w := s.concurrent(t)
	const nSKUs, buyers, stock = 3, 300, 60
	skus := make([]string, nSKUs)
	for i := range skus {
		skus[i] = s.sku(t, fmt.Sprint("sku-", i))
		mustInit(t, ctx, m, skus[i], stock)
	}
	om, orders := m.(orderManager)
	var mu sync.Mutex
	took := map[string]ledgerCall{} // by reference
	var failed []error
	record := func(ref string, c ledgerCall, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			took[ref] = c
		case errors.Is(err, inventory.ErrDuplicate), errors.Is(err, inventory.ErrInsufficientStock),
			errors.Is(err, inventory.ErrHoldReleased), errors.Is(err, inventory.ErrContention):
		default:
			failed = append(failed, err)
		}
	}
	// call runs one attempt after another of op, each with a reference of
	// its own, until one reports something else than ErrContention.
	call := func(name string, c ledgerCall, op func(ref string) error) error {
		w.begin()
		defer w.end()
		for attempt := 0; ; attempt++ {
			ref := fmt.Sprintf("%s#%d", name, attempt)
			err := op(ref)
			record(ref, c, err)
			if !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
				return err
			}
			w.retried()
		}
	}
	start(buyers, func(i int) {
		sku := skus[i%nSKUs]
		key := s.sku(t, fmt.Sprint("buyer-", i))
		switch {
		case i%5 == 4 && orders:
			hold := s.sku(t, fmt.Sprint("hold-", i))
			err := call(fmt.Sprint("reserve-", i), ledgerCall{sku: sku, kind: ledger.Reserve, units: 1, hold: hold}, func(string) error {
				return om.Reserve(ctx, hold, lines(sku, 1), s.longTTL())
			})
			if err != nil {
				return
			}
			end, kind := om.Confirm, ledger.Confirm
			if i%2 == 0 {
				end, kind = om.Cancel, ledger.Cancel
			}
			_ = call(fmt.Sprint("end-", i), ledgerCall{sku: sku, kind: kind, units: 1, hold: hold}, func(string) error {
				return end(ctx, hold)
			})
		case i%3 == 2:
			_ = call(fmt.Sprint("return-", i), ledgerCall{sku: sku, kind: ledger.Return, units: 1}, func(ref string) error {
				_, err := m.Return(ctx, sku, 1, inventory.WithRef(ref))
				return err
			})
		case i%2 == 0:
			for try := range 3 { // a keyed call and its retries: one takes effect
				_ = call(fmt.Sprint("reduce-", i, "-", try), ledgerCall{sku: sku, kind: ledger.Reduce, units: 1, key: key}, func(ref string) error {
					_, err := m.Reduce(ctx, sku, 1, inventory.WithKey(key), inventory.WithRef(ref))
					return err
				})
			}
		default:
			_ = call(fmt.Sprint("reduce-", i), ledgerCall{sku: sku, kind: ledger.Reduce, units: 1}, func(ref string) error {
				_, err := m.Reduce(ctx, sku, 1, inventory.WithRef(ref))
				return err
			})
		}
	})
	require.Empty(t, failed, "calls failed unexpectedly")
	require.NoError(t, ctx.Err())

	n := matchEntries(t, ctx, m, skus, took)
	t.Logf("%d moves, each with its entry; %d SKUs replayed", n, nSKUs)
}

// matchEntries replays each of skus and matches their entries (Init's
// aside) with the calls that took effect, by reference (a hold's entries
// by kind and hold id): one entry per call, none without its call. It
// returns how many matched.
func matchEntries(t *testing.T, ctx context.Context, m ledgerManager, skus []string, took map[string]ledgerCall) int {
	t.Helper()
	byRef := map[string]ledger.Entry{}
	for _, sku := range skus {
		checkLedger(t, ctx, m, sku)
		for _, e := range entries(t, ctx, m, sku) {
			if e.Kind == ledger.Init {
				continue
			}
			ref := e.Ref
			if e.Hold != "" { // hold entries carry no reference: name them by hold
				ref = string(e.Kind) + "/" + e.Hold
			}
			_, dup := byRef[ref]
			require.False(t, dup, "two entries for one call: %+v", e)
			byRef[ref] = e
		}
	}
	n := 0
	for ref, c := range took {
		if c.hold != "" {
			ref = string(c.kind) + "/" + c.hold
		}
		e, ok := byRef[ref]
		if !assert.True(t, ok, "a move without its entry: %s %+v", ref, c) {
			continue
		}
		n++
		assert.Equal(t, want{Kind: c.kind, Units: c.units, Key: c.key, Hold: c.hold, Ref: e.Ref, After: e.After},
			wants([]ledger.Entry{e})[0], "entry of %s", ref)
		assert.Equal(t, c.sku, e.SKU, "entry of %s", ref)
	}
	assert.Equal(t, len(byRef), n, "entries without their move: %d entries, %d moves", len(byRef), n)
	return n
}
