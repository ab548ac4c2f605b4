package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/poll"
)

// EventKind says what a stock [Event] reports.
type EventKind string

// The kinds of events, each derived from one entry.
const (
	// SoldOut: the entry took Available from above 0 to 0.
	SoldOut EventKind = "sold_out"
	// BackInStock: the entry took Available from 0 to above 0.
	BackInStock EventKind = "back_in_stock"
	// BelowThreshold: the entry took Available from at least the SKU's
	// threshold to below it (a threshold of 0 never fires).
	BelowThreshold EventKind = "below_threshold"
	// HoldExpired: an [Expire] entry, a hold released after its TTL.
	HoldExpired EventKind = "hold_expired"
)

// Event is a change of a SKU's stock that a shop acts on, derived from
// one entry of the ledger.
type Event struct {
	// ID is the same each time the event is delivered, in this process or
	// another: "KIND:POS:SKU", the kind, the entry's position and its SKU.
	// An entry gives at most one event of each kind, so an ID names one
	// event; it is the key a handler deduplicates on.
	ID   string
	Kind EventKind
	// Before is Available before the entry, After.Available of Entry after it.
	Before int64
	// Threshold is the threshold crossed (BelowThreshold), else 0.
	Threshold int64
	// Entry is the entry the event derives from: its SKU, Pos, Units,
	// After, Hold (of HoldExpired), Ref and Time.
	Entry Entry
}

// Cursor is where a [Feed] is in one SKU's history: the position of the
// last entry whose events were all delivered, and Available after it. The
// zero Cursor is before the SKU's first entry.
//
// Available is there for Init, the one kind whose entry does not say the
// stock before it: an Init sets Available, and what it crossed is known
// only from the entry before it.
type Cursor struct {
	Pos       int64
	Available int64
}

// Before returns Available before entry e, undoing its kind, and true; for
// an [Init] entry, which sets Available whatever it was, it returns c's
// Available, and false when c is the zero Cursor (no entry before it is
// known). It returns false for a kind it does not know.
func (c Cursor) Before(e Entry) (int64, bool) {
	switch e.Kind {
	case Reduce, Reserve:
		return e.After.Available + e.Units, true
	case Return, Cancel, Expire:
		return e.After.Available - e.Units, true
	case Confirm, LostHeld:
		return e.After.Available, true
	case Lost:
		return e.After.Available + e.Units, true
	case Init:
		return c.Available, c.Pos > 0
	}
	return 0, false // a kind unknown to this package
}

// Derive returns the events of entry e of a SKU whose threshold is
// threshold (0: none), c being the feed's cursor just before e. They come
// in this order: HoldExpired (an Expire entry), then BelowThreshold,
// SoldOut and BackInStock when Available crossed them.
//
// Every kind but Init says the stock before it, so its events depend on e
// alone. An Init depends on c: it is compared with Available after the
// entry before it (c.Available), and when no entry before it is known (c
// is the zero Cursor: the SKU's first entry, or the first one kept of a
// trimmed history) it gives no event, there being no stock it crossed
// from. An Init that sets a sold-out SKU's stock is therefore
// BackInStock, one that sets it to 0 SoldOut.
func Derive(c Cursor, e Entry, threshold int64) []Event {
	var out []Event
	add := func(k EventKind, before, th int64) {
		out = append(out, Event{ID: EventID(k, e.Pos, e.SKU), Kind: k, Before: before, Threshold: th, Entry: e})
	}
	before, known := c.Before(e)
	if e.Kind == Expire {
		add(HoldExpired, before, 0)
	}
	if !known {
		return out
	}
	after := e.After.Available
	if threshold > 0 && before >= threshold && after < threshold {
		add(BelowThreshold, before, threshold)
	}
	if before > 0 && after == 0 {
		add(SoldOut, before, 0)
	}
	if before == 0 && after > 0 {
		add(BackInStock, before, 0)
	}
	return out
}

// EventID returns the ID of the event of kind k of the entry at position
// pos of sku: "KIND:POS:SKU" (a kind and a position hold no colon, so the
// ID reads back unambiguously whatever the SKU).
func EventID(k EventKind, pos int64, sku string) string {
	return string(k) + ":" + strconv.FormatInt(pos, 10) + ":" + sku
}

// CursorStore keeps a [Feed]'s cursors, one per SKU. What a caller
// persists, to resume after a crash, is for each SKU the last Cursor that
// Save was given, both fields of it. Load of a SKU never saved returns the
// zero Cursor (the feed then starts at the SKU's first entry).
//
// Save is called after the events of an entry are delivered, so a store
// that loses the latest Saves (not yet flushed when the process died)
// loses nothing but makes the feed deliver those events again, with the
// same IDs. It must never return a cursor past one it was given. A store
// belongs to one consumer: two handlers that each want every event need
// a store each.
type CursorStore interface {
	Load(ctx context.Context, sku string) (Cursor, error)
	Save(ctx context.Context, sku string, c Cursor) error
}

// MemoryCursors is a [CursorStore] in memory, safe for concurrent use.
// Its cursors live as long as the process (or the value): a feed that
// starts again with a new one delivers every SKU's events from its first
// entry again. Use it in tests, or with a handler for which that is fine.
type MemoryCursors struct {
	mu sync.Mutex
	m  map[string]Cursor
}

// Load implements [CursorStore].
func (s *MemoryCursors) Load(_ context.Context, sku string) (Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[sku], nil
}

// Save implements [CursorStore].
func (s *MemoryCursors) Save(_ context.Context, sku string, c Cursor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]Cursor{}
	}
	s.m[sku] = c
	return nil
}

// Handler receives the events of a [Feed]. A nil error means the event is
// handled; any error makes the feed deliver it again later. It may receive
// an event more than once (after an error, a crash, or a lost Save), always
// with the same ID.
type Handler func(ctx context.Context, ev Event) error

// FeedOption configures a [Feed].
type FeedOption func(*feedConfig)

type feedConfig struct {
	cursors    CursorStore
	threshold  int64
	thresholds map[string]int64
}

// WithCursors makes the feed keep its cursors in s (default: a
// [MemoryCursors] of its own).
func WithCursors(s CursorStore) FeedOption { return func(c *feedConfig) { c.cursors = s } }

// WithThreshold sets the threshold of BelowThreshold for every SKU that
// WithSKUThreshold does not name (default 0: none).
func WithThreshold(n int64) FeedOption { return func(c *feedConfig) { c.threshold = n } }

// WithSKUThreshold sets the threshold of BelowThreshold for sku (0: none),
// one of the feed's SKUs.
func WithSKUThreshold(sku string, n int64) FeedOption {
	return func(c *feedConfig) {
		if c.thresholds == nil {
			c.thresholds = map[string]int64{}
		}
		c.thresholds[sku] = n
	}
}

// Feed delivers the events of some SKUs' ledgers to a handler, at least
// once and in order per SKU, outbox style: the ledger is the outbox, and a
// cursor per SKU ([CursorStore]) says how far the handler has got.
//
// A SKU's events are delivered in the order of its entries, and an event
// is delivered only once every event before it of its SKU was handled; the
// SKUs are independent (a handler that keeps failing on one SKU holds back
// that SKU only), with no order across SKUs. After a crash, a Feed made
// with the same CursorStore carries on from the saved cursors: no event is
// missed (of the entries still kept: a trimmed stream or deleted rows
// take theirs with them), and those delivered since the last Save come
// again with their IDs. Changing a threshold changes the BelowThreshold events of the
// entries not yet delivered only.
//
// Poll runs one pass, Run polls until its ctx is done. A Feed runs one
// pass at a time (a Poll waits for the one running).
type Feed struct {
	r      Reader
	skus   []string
	handle Handler
	cfg    feedConfig

	mu    sync.Mutex
	curs  map[string]Cursor // loaded from cfg.cursors, then kept here
	saved map[string]Cursor // what cfg.cursors was last given, per SKU
}

// NewFeed returns a feed of the events of skus (each once, at least one)
// in r's ledger, delivered to handle. The arguments are checked here,
// wrapping [inventory.ErrInvalidArgument]; nothing is read until Poll or
// Run.
func NewFeed(r Reader, skus []string, handle Handler, opts ...FeedOption) (*Feed, error) {
	f := &Feed{r: r, skus: skus, handle: handle, curs: map[string]Cursor{}, saved: map[string]Cursor{}}
	for _, o := range opts {
		o(&f.cfg)
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("%w: ledger feed: %w", inventory.ErrInvalidArgument, err)
	}
	if f.cfg.cursors == nil {
		f.cfg.cursors = &MemoryCursors{}
	}
	f.skus = append([]string(nil), skus...)
	return f, nil
}

func (f *Feed) check() error {
	switch {
	case f.r == nil:
		return errors.New("no Reader")
	case f.handle == nil:
		return errors.New("no Handler")
	case len(f.skus) == 0:
		return errors.New("no SKU")
	case f.cfg.threshold < 0:
		return fmt.Errorf("threshold %d is negative", f.cfg.threshold)
	}
	seen := make(map[string]bool, len(f.skus))
	for _, sku := range f.skus {
		if err := driver.ValidateSKU(sku); err != nil {
			return err
		}
		if seen[sku] {
			return fmt.Errorf("SKU %q given twice", sku)
		}
		seen[sku] = true
	}
	for sku, n := range f.cfg.thresholds {
		if !seen[sku] {
			return fmt.Errorf("threshold of %q, which is not one of the feed's SKUs", sku)
		}
		if n < 0 {
			return fmt.Errorf("threshold %d of %q is negative", n, sku)
		}
	}
	return nil
}

// Threshold returns the threshold of sku's BelowThreshold events.
func (f *Feed) Threshold(sku string) int64 {
	if n, ok := f.cfg.thresholds[sku]; ok {
		return n
	}
	return f.cfg.threshold
}

// Poll delivers, SKU after SKU, every event of the entries in the ledger
// now past each SKU's cursor, saving the cursor after each entry that
// gave events and at the end. A SKU stops at the first event its handler
// fails, or at an error of the Reader or the CursorStore; the other SKUs
// carry on. Poll returns those errors joined, each naming its SKU, or
// ctx's error once ctx is done.
func (f *Feed) Poll(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, sku := range f.skus {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.pollSKU(ctx, sku); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("ledger feed of %q: %w", sku, err))
		}
	}
	return errors.Join(errs...)
}

// pollSKU delivers sku's events up to the end of its ledger as read now.
func (f *Feed) pollSKU(ctx context.Context, sku string) error {
	c, ok := f.curs[sku]
	if !ok {
		var err error
		if c, err = f.cfg.cursors.Load(ctx, sku); err != nil {
			return fmt.Errorf("loading its cursor: %w", err)
		}
		f.curs[sku], f.saved[sku] = c, c
	}
	th := f.Threshold(sku)
	save := func() error {
		if c == f.saved[sku] {
			return nil
		}
		if err := f.cfg.cursors.Save(ctx, sku, c); err != nil {
			return fmt.Errorf("saving its cursor %+v: %w", c, err)
		}
		f.saved[sku] = c
		return nil
	}
	for {
		page, err := f.r.Entries(ctx, sku, c.Pos, MaxPage)
		if err != nil {
			return errors.Join(err, save())
		}
		for _, e := range page {
			evs := Derive(c, e, th)
			for _, ev := range evs {
				if err := ctx.Err(); err != nil {
					return errors.Join(err, save())
				}
				if err := f.handle(ctx, ev); err != nil {
					return errors.Join(fmt.Errorf("handling event %s: %w", ev.ID, err), save())
				}
			}
			c = Cursor{Pos: e.Pos, Available: e.After.Available}
			f.curs[sku] = c
			if len(evs) > 0 {
				if err := save(); err != nil {
					return err
				}
			}
		}
		if len(page) < MaxPage {
			return save()
		}
	}
}

// Run polls (Poll) at once and then every period until ctx is done, and
// then returns ctx's error. onErr, if not nil, receives each failed
// Poll's error (the loop carries on, and the next Poll retries what
// failed). Run it in a goroutine of your own; cancelling ctx stops it,
// within the Reader's or handler's call under way (both get ctx), and
// leaves no goroutine behind.
func (f *Feed) Run(ctx context.Context, period time.Duration, onErr func(error)) error {
	if period <= 0 {
		return fmt.Errorf("%w: ledger feed period %v is not positive", inventory.ErrInvalidArgument, period)
	}
	return poll.Every(ctx, period, true, f.Poll, onErr)
}
