package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
)

// entry is an entry of sku at pos, its After.Available avail.
func entry(sku string, pos int64, k ledger.Kind, units, avail int64) ledger.Entry {
	return ledger.Entry{SKU: sku, Pos: pos, Kind: k, Units: units, After: ledger.Stock{Available: avail}, Hold: "h"}
}

// kinds returns the kinds of evs.
func kinds(evs []ledger.Event) []ledger.EventKind {
	var out []ledger.EventKind
	for _, ev := range evs {
		out = append(out, ev.Kind)
	}
	return out
}

func TestDerive(t *testing.T) {
	const (
		below = ledger.BelowThreshold
		out   = ledger.SoldOut
		back  = ledger.BackInStock
		exp   = ledger.HoldExpired
	)
	known := ledger.Cursor{Pos: 4, Available: 5} // an entry before, Available 5 after it
	for _, c := range []struct {
		name   string
		c      ledger.Cursor
		e      ledger.Entry
		th     int64
		want   []ledger.EventKind
		before int64
	}{
		{"reduce crosses the threshold", known, entry("a", 7, ledger.Reduce, 3, 2), 3, []ledger.EventKind{below}, 5},
		{"reduce to the threshold stays above", known, entry("a", 7, ledger.Reduce, 1, 3), 3, nil, 4},
		{"reduce from the threshold to 0", known, entry("a", 7, ledger.Reduce, 3, 0), 3, []ledger.EventKind{below, out}, 3},
		{"reduce below the threshold to 0", known, entry("a", 7, ledger.Reduce, 2, 0), 3, []ledger.EventKind{out}, 2},
		{"no threshold", known, entry("a", 7, ledger.Reduce, 5, 0), 0, []ledger.EventKind{out}, 5},
		{"return from 0", known, entry("a", 7, ledger.Return, 1, 1), 3, []ledger.EventKind{back}, 0},
		{"return above 0", known, entry("a", 7, ledger.Return, 1, 2), 3, nil, 1},
		{"reserve the last", known, entry("a", 7, ledger.Reserve, 1, 0), 0, []ledger.EventKind{out}, 1},
		{"confirm moves no available", known, entry("a", 7, ledger.Confirm, 2, 0), 3, nil, 0},
		{"cancel from 0", known, entry("a", 7, ledger.Cancel, 2, 2), 3, []ledger.EventKind{back}, 0},
		{"expire from 0", known, entry("a", 7, ledger.Expire, 1, 1), 3, []ledger.EventKind{exp, back}, 0},
		{"expire above 0", known, entry("a", 7, ledger.Expire, 1, 4), 3, []ledger.EventKind{exp}, 3},
		{"expire from 0, no cursor", ledger.Cursor{}, entry("a", 7, ledger.Expire, 1, 1), 3, []ledger.EventKind{exp, back}, 0},
		{"first init", ledger.Cursor{}, entry("a", 1, ledger.Init, 10, 10), 3, nil, 0},
		{"first init of 0", ledger.Cursor{}, entry("a", 1, ledger.Init, 0, 0), 3, nil, 0},
		{"init to 0", known, entry("a", 7, ledger.Init, 0, 0), 3, []ledger.EventKind{below, out}, 5},
		{"init of a sold-out SKU", ledger.Cursor{Pos: 4}, entry("a", 7, ledger.Init, 10, 10), 3, []ledger.EventKind{back}, 0},
		{"init that changes no state", known, entry("a", 7, ledger.Init, 4, 4), 3, nil, 5},
		{"unknown kind", known, entry("a", 7, "steal", 1, 0), 3, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := ledger.Derive(c.c, c.e, c.th)
			require.Equal(t, c.want, kinds(evs))
			for _, ev := range evs {
				require.Equal(t, ledger.EventID(ev.Kind, c.e.Pos, "a"), ev.ID)
				require.Equal(t, c.e, ev.Entry)
				require.Equal(t, c.before, ev.Before)
				if ev.Kind == below {
					require.Equal(t, c.th, ev.Threshold)
				} else {
					require.Zero(t, ev.Threshold)
				}
			}
			require.Equal(t, evs, ledger.Derive(c.c, c.e, c.th), "the same entry gives the same events")
		})
	}
	require.Equal(t, "sold_out:12:a:b:7", ledger.EventID(ledger.SoldOut, 12, "a:b:7"))
}

// book is an in-memory ledger of several SKUs, safe for concurrent use:
// entries appended with add, read with Entries.
type book struct {
	mu    sync.Mutex
	es    map[string][]ledger.Entry
	pos   int64
	stock map[string]int64
	fail  error // Entries fails with it while set
}

func newBook() *book { return &book{es: map[string][]ledger.Entry{}, stock: map[string]int64{}} }

// add appends an entry of k of units to sku and returns it.
func (b *book) add(sku string, k ledger.Kind, units int64) ledger.Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pos += 2 // positions are not dense
	s, _ := ledger.Stock{Available: b.stock[sku]}.Apply(k, units)
	b.stock[sku] = s.Available
	e := ledger.Entry{SKU: sku, Pos: b.pos, Kind: k, Units: units, After: ledger.Stock{Available: s.Available}}
	b.es[sku] = append(b.es[sku], e)
	return e
}

func (b *book) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if err := ledger.CheckPage(after, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return nil, b.fail
	}
	es := b.es[sku]
	i := slices.IndexFunc(es, func(e ledger.Entry) bool { return e.Pos > after })
	if i < 0 {
		return nil, nil
	}
	return slices.Clone(es[i:min(len(es), i+limit)]), nil
}

// want returns the events of every SKU's whole history, SKU by SKU.
func (b *book) want(th func(sku string) int64) map[string][]ledger.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string][]ledger.Event{}
	for sku, es := range b.es {
		var c ledger.Cursor
		for _, e := range es {
			out[sku] = append(out[sku], ledger.Derive(c, e, th(sku))...)
			c = ledger.Cursor{Pos: e.Pos, Available: e.After.Available}
		}
	}
	return out
}

// fill writes a history of n rounds to each of skus: a sale down to 0,
// returns, a hold that expires.
func fill(b *book, n int, skus ...string) {
	for _, sku := range skus {
		b.add(sku, ledger.Init, 5)
	}
	for range n {
		for _, sku := range skus {
			b.add(sku, ledger.Reduce, 3)  // 2: below 3
			b.add(sku, ledger.Reduce, 2)  // 0: sold out
			b.add(sku, ledger.Return, 1)  // 1: back
			b.add(sku, ledger.Reserve, 1) // 0: sold out
			b.add(sku, ledger.Expire, 1)  // 1: expired, back
			b.add(sku, ledger.Init, 5)    // 5
			b.add(sku, ledger.Init, 0)    // 0: below, sold out
			b.add(sku, ledger.Init, 5)    // 5: back
		}
	}
}

// deliveries records what a handler was given, and fails or stops as told.
type deliveries struct {
	mu    sync.Mutex
	got   []ledger.Event
	calls int
	// hook, if not nil, runs before each event is recorded, with the
	// number of the call (from 1); an error fails the call.
	hook func(n int, ev ledger.Event) error
}

func (d *deliveries) handle(_ context.Context, ev ledger.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.hook != nil {
		if err := d.hook(d.calls, ev); err != nil {
			return err
		}
	}
	d.got = append(d.got, ev)
	return nil
}

func (d *deliveries) events() []ledger.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// requireDelivered checks that the handled events of runs, in the order
// of the runs, hold every event of want, each SKU's in order, and nothing
// else: a duplicate carries the ID, and is the event, delivered before.
func requireDelivered(t *testing.T, want map[string][]ledger.Event, runs ...[]ledger.Event) {
	t.Helper()
	seen := map[string]ledger.Event{}
	first := map[string][]ledger.Event{}
	dups := 0
	for _, run := range runs {
		for _, ev := range run {
			if prev, ok := seen[ev.ID]; ok {
				require.Equal(t, prev.Kind, ev.Kind, "duplicate %s", ev.ID)
				require.Equal(t, prev.Before, ev.Before, "duplicate %s", ev.ID)
				require.Equal(t, prev.Threshold, ev.Threshold, "duplicate %s", ev.ID)
				require.Equal(t, prev.Entry.Pos, ev.Entry.Pos, "duplicate %s", ev.ID)
				require.Equal(t, prev.Entry.After, ev.Entry.After, "duplicate %s", ev.ID)
				require.True(t, prev.Entry.Time.Equal(ev.Entry.Time), "duplicate %s", ev.ID)
				dups++
				continue
			}
			seen[ev.ID] = ev
			first[ev.Entry.SKU] = append(first[ev.Entry.SKU], ev)
		}
	}
	require.Len(t, first, len(want), "SKUs with events")
	for sku, evs := range want {
		require.Equal(t, ids(evs), ids(first[sku]), "events of %q, in order", sku)
	}
	t.Logf("%d events, %d delivered again", len(seen), dups)
}

func ids(evs []ledger.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func threshold3(string) int64 { return 3 }

func TestFeedDeliversInOrder(t *testing.T) {
	b := newBook()
	fill(b, 300, "a", "b") // > 2 pages of each
	var d deliveries
	f, err := ledger.NewFeed(b, []string{"a", "b", "c"}, d.handle, ledger.WithThreshold(3))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, f.Poll(ctx))
	want := b.want(threshold3)
	require.Len(t, want["a"], 300*9, "9 events a round")
	requireDelivered(t, want, d.events())
	require.Len(t, d.events(), 2*len(want["a"]), "each once")

	// A Poll with nothing new delivers nothing; new entries come next.
	require.NoError(t, f.Poll(ctx))
	require.Len(t, d.events(), 2*len(want["a"]))
	b.add("c", ledger.Init, 1)
	b.add("c", ledger.Reduce, 1)
	require.NoError(t, f.Poll(ctx))
	got := d.events()
	require.Len(t, got, 2*len(want["a"])+1)
	require.Equal(t, ledger.SoldOut, got[len(got)-1].Kind)
	require.Equal(t, "c", got[len(got)-1].Entry.SKU)
	requireDelivered(t, b.want(threshold3), got)
}

func TestFeedThresholds(t *testing.T) {
	b := newBook()
	for _, sku := range []string{"a", "b", "c"} {
		b.add(sku, ledger.Init, 10)
		b.add(sku, ledger.Reduce, 5) // 5
		b.add(sku, ledger.Reduce, 4) // 1
	}
	var d deliveries
	f, err := ledger.NewFeed(b, []string{"a", "b", "c"}, d.handle, ledger.WithThreshold(2),
		ledger.WithSKUThreshold("a", 8), ledger.WithSKUThreshold("c", 0))
	require.NoError(t, err)
	require.NoError(t, f.Poll(context.Background()))
	var got []string
	for _, ev := range d.events() {
		got = append(got, fmt.Sprintf("%s %s %d", ev.Entry.SKU, ev.Kind, ev.Threshold))
	}
	require.Equal(t, []string{"a below_threshold 8", "b below_threshold 2"}, got)
	require.Equal(t, int64(8), f.Threshold("a"))
	require.Equal(t, int64(2), f.Threshold("b"))
	require.Equal(t, int64(0), f.Threshold("c"))
}

// TestFeedResumes: a handler that fails, and a feed stopped mid-way, then
// a new feed from the saved cursors: every event delivered, each SKU in
// order, duplicates with the same id.
func TestFeedResumes(t *testing.T) {
	b := newBook()
	fill(b, 150, "a", "b", "c")
	want := b.want(threshold3)
	store := &ledger.MemoryCursors{}
	ctx := context.Background()
	newFeed := func(d *deliveries) *ledger.Feed {
		f, err := ledger.NewFeed(b, []string{"a", "b", "c"}, d.handle, ledger.WithThreshold(3), ledger.WithCursors(store))
		require.NoError(t, err)
		return f
	}

	// 1: the handler fails at the 500th call, and on b's sold-out events:
	// a and c are delivered up to the failure, b up to its first sold out.
	boom := errors.New("boom")
	failing := &deliveries{hook: func(n int, ev ledger.Event) error {
		if n == 500 || (ev.Entry.SKU == "b" && ev.Kind == ledger.SoldOut) {
			return boom
		}
		return nil
	}}
	err := newFeed(failing).Poll(ctx)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, `"b"`)
	require.ErrorContains(t, err, `"a"`) // call 500 is a's
	c, err := store.Load(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, b.es["c"][len(b.es["c"])-1].Pos, c.Pos, "c, after a's failure, went on to its end")

	// 2: a feed whose ctx ends at its 300th call (a crash of the watcher).
	stopCtx, stop := context.WithCancel(ctx)
	stopped := &deliveries{hook: func(n int, _ ledger.Event) error {
		if n == 300 {
			stop()
		}
		return nil
	}}
	require.ErrorIs(t, newFeed(stopped).Run(stopCtx, time.Hour, nil), context.Canceled)
	require.Len(t, stopped.events(), 300, "nothing handled once ctx ended")

	// 3: a feed that runs to the end.
	done := &deliveries{}
	require.NoError(t, newFeed(done).Poll(ctx))
	requireDelivered(t, want, failing.events(), stopped.events(), done.events())
	i := slices.IndexFunc(done.events(), func(ev ledger.Event) bool { return ev.Entry.SKU == "b" })
	require.Equal(t, want["b"][1].ID, done.events()[i].ID, "b resumes at the event its handler failed")
}

// failingStore is a CursorStore whose Saves fail while fail is set.
type failingStore struct {
	ledger.MemoryCursors
	fail bool
}

func (s *failingStore) Save(ctx context.Context, sku string, c ledger.Cursor) error {
	if s.fail {
		return errors.New("store down")
	}
	return s.MemoryCursors.Save(ctx, sku, c)
}

// TestFeedStoreAndReaderErrors: a failing Save or Entries is reported,
// and costs duplicates at worst: nothing is missed.
func TestFeedStoreAndReaderErrors(t *testing.T) {
	b := newBook()
	fill(b, 3, "a", "b")
	store := &failingStore{fail: true}
	ctx := context.Background()
	var d1, d2, d3 deliveries
	f1, err := ledger.NewFeed(b, []string{"a", "b"}, d1.handle, ledger.WithThreshold(3), ledger.WithCursors(store))
	require.NoError(t, err)
	err = f1.Poll(ctx)
	require.ErrorContains(t, err, "store down")
	require.Len(t, d1.events(), 2, "each SKU stops at its first Save")

	store.fail = false
	b.fail = errors.New("reader down")
	require.ErrorIs(t, f1.Poll(ctx), b.fail)
	c, err := store.Load(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, b.es["a"][1].Pos, c.Pos, "the Save that failed is made at the next Poll")

	// A new feed on the store that lost the Saves: duplicates, nothing missed.
	b.fail = nil
	f2, err := ledger.NewFeed(b, []string{"a", "b"}, d2.handle, ledger.WithThreshold(3), ledger.WithCursors(&ledger.MemoryCursors{}))
	require.NoError(t, err)
	require.NoError(t, f2.Poll(ctx))
	require.NoError(t, f1.Poll(ctx))
	requireDelivered(t, b.want(threshold3), d1.events(), d2.events())
	requireDelivered(t, b.want(threshold3), d1.events())

	// A Feed after f1 on its store delivers nothing more.
	f3, err := ledger.NewFeed(b, []string{"a", "b"}, d3.handle, ledger.WithCursors(store))
	require.NoError(t, err)
	require.NoError(t, f3.Poll(ctx))
	require.Empty(t, d3.events())
}

// TestFeedRun: Run delivers what is appended while it runs, and returns
// ctx's error when ctx ends, leaving no goroutine (TestMain's goleak).
func TestFeedRun(t *testing.T) {
	b := newBook()
	b.add("a", ledger.Init, 1)
	got := make(chan ledger.Event, 10)
	f, err := ledger.NewFeed(b, []string{"a"}, func(_ context.Context, ev ledger.Event) error {
		got <- ev
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	var errs []error
	go func() { ran <- f.Run(ctx, time.Millisecond, func(err error) { errs = append(errs, err) }) }()
	b.add("a", ledger.Reduce, 1)
	require.Equal(t, ledger.SoldOut, (<-got).Kind)
	b.add("a", ledger.Return, 2)
	require.Equal(t, ledger.BackInStock, (<-got).Kind)
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
	require.Empty(t, errs, "no Poll failed")
	require.Empty(t, got)

	require.ErrorIs(t, f.Run(context.Background(), 0, nil), inventory.ErrInvalidArgument)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, f.Poll(done), context.Canceled)
	require.ErrorIs(t, f.Run(done, time.Hour, nil), context.Canceled)
}

// TestFeedRunReportsErrors: a Poll that fails is reported to onErr, and
// the next one retries it.
func TestFeedRunReportsErrors(t *testing.T) {
	b := newBook()
	b.add("a", ledger.Init, 1)
	b.add("a", ledger.Reduce, 1)
	b.fail = errors.New("reader down")
	got := make(chan ledger.Event, 1)
	f, err := ledger.NewFeed(b, []string{"a"}, func(_ context.Context, ev ledger.Event) error {
		got <- ev
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan error, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- f.Run(ctx, time.Millisecond, func(err error) {
			select {
			case failed <- err:
			default:
			}
		})
	}()
	require.ErrorContains(t, <-failed, "reader down")
	b.mu.Lock()
	b.fail = nil
	b.mu.Unlock()
	require.Equal(t, ledger.SoldOut, (<-got).Kind)
	cancel()
	require.ErrorIs(t, <-ran, context.Canceled)
}

func TestNewFeedBadArguments(t *testing.T) {
	b := newBook()
	h := func(context.Context, ledger.Event) error { return nil }
	for name, c := range map[string]struct {
		r    ledger.Reader
		skus []string
		h    ledger.Handler
		opts []ledger.FeedOption
	}{
		"no reader":                {nil, []string{"a"}, h, nil},
		"no handler":               {b, []string{"a"}, nil, nil},
		"no SKU":                   {b, nil, h, nil},
		"bad SKU":                  {b, []string{"a", ""}, h, nil},
		"control character":        {b, []string{"a\n"}, h, nil},
		"SKU twice":                {b, []string{"a", "a"}, h, nil},
		"negative default":         {b, []string{"a"}, h, []ledger.FeedOption{ledger.WithThreshold(-1)}},
		"negative SKU's":           {b, []string{"a"}, h, []ledger.FeedOption{ledger.WithSKUThreshold("a", -1)}},
		"threshold of another SKU": {b, []string{"a"}, h, []ledger.FeedOption{ledger.WithSKUThreshold("b", 1)}},
	} {
		_, err := ledger.NewFeed(c.r, c.skus, c.h, c.opts...)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
}
