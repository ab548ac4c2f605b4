// Package ledger is the movement ledger a Manager keeps when asked to
// (optimistic.WithLedger, rowlock.WithLedger, luascript.WithLedger,
// tiered.WithLedger, and the lock strategies through
// sqlstore.WithLedger or redisstore.WithLedger): one [Entry] per move that
// took effect, written in the same atomic step as the move, so that "why
// is this SKU at 3?" has an answer after the idempotency keys have
// expired.
//
// It is a package of its own, not part of the root package, because the
// root is the contract every Manager keeps and the ledger is opt-in: a
// service that never asks for a ledger never reads these names, and one
// that does reads them here, beside the functions that only make sense on
// a ledger ([History], [Replay], [Check]). The one per-call option the
// ledger records, the caller's reference, is [inventory.WithRef], beside
// [inventory.WithKey].
//
// # What is recorded
//
// Each move that took effect gives one entry per SKU it moved: Init
// ([Init]), Reduce and the lines of ReduceLines ([Reduce]), Return and
// ReturnLines ([Return]), the lines of Reserve ([Reserve]), Confirm
// ([Confirm]), Cancel ([Cancel]) and a hold released after its TTL, by a
// later call, Sweep or a Confirm or Cancel that came too late ([Expire]).
// A call that changed nothing (refused, a duplicate, failed) records
// nothing. A backend that finds units gone without a call (tiered, when
// Redis lost its state) records their write-off ([Lost], [LostHeld]), so
// that the replay still adds up to the stock. An entry carries the SKU, its position in the SKU's history,
// the kind, the units, the stock after it, the call's idempotency key and
// reference, the hold id of a hold's entry, and the time on the backend's
// clock.
//
// # Reading it
//
// A Manager that keeps a ledger is a [Reader]: Entries returns a page of
// one SKU's history after a position; [History] walks it all as a Go
// iterator; [Replay] folds it into the stock it leads to and checks each
// entry against the ones before it; [Check] compares that with the stock
// the Manager reads back.
//
// # Events
//
// The ledger is also an outbox: a [Feed] delivers the stock events that
// some SKUs' entries carry ([SoldOut], [BackInStock], [BelowThreshold] a
// per-SKU threshold, [HoldExpired]) to a [Handler], at least once and in
// order per SKU, from a [Cursor] per SKU kept in a [CursorStore], so that
// a feed made again after a crash misses nothing; a duplicate carries the
// same [Event] ID. [Derive] is how an entry becomes events.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/stockkit/inventory"
)

// ErrNotKept is the error of [Reader.Entries] on a Manager that keeps no
// ledger (it was made without its WithLedger option).
var ErrNotKept = errors.New("ledger: no ledger is kept")

// Kind says what moved.
type Kind string

// The kinds of entries, and what each does to the stock.
const (
	Init    Kind = "init"    // Available = Units
	Reduce  Kind = "reduce"  // Available -= Units; Sold += Units
	Return  Kind = "return"  // Available += Units; Sold -= Units
	Reserve Kind = "reserve" // Available -= Units; Held += Units
	Confirm Kind = "confirm" // Held -= Units; Sold += Units
	Cancel  Kind = "cancel"  // Held -= Units; Available += Units
	Expire  Kind = "expire"  // Held -= Units; Available += Units (after the hold's TTL)

	// Write-offs: no call made them; the backend found units gone and
	// wrote them off, with the reason in Ref (tiered, when Redis lost its
	// state or an Init dropped holds). The units are neither sold nor
	// back on sale.
	Lost     Kind = "lost"      // Available -= Units
	LostHeld Kind = "lost-held" // Held -= Units
)

// WrittenOff reports whether k is a write-off ([Lost], [LostHeld]): an
// entry no call made.
func (k Kind) WrittenOff() bool { return k == Lost || k == LostHeld }

// Stock is a SKU's stock: the units on sale (what Get returns), the units
// held by holds, and the units sold (reduced and confirmed, less
// returned) since the SKU's first entry.
type Stock struct {
	Available, Held, Sold int64
}

// Apply returns s after an entry of kind k of units units.
func (s Stock) Apply(k Kind, units int64) (Stock, error) {
	switch k {
	case Init:
		s.Available = units
	case Reduce:
		s.Available, s.Sold = s.Available-units, s.Sold+units
	case Return:
		s.Available, s.Sold = s.Available+units, s.Sold-units
	case Reserve:
		s.Available, s.Held = s.Available-units, s.Held+units
	case Confirm:
		s.Held, s.Sold = s.Held-units, s.Sold+units
	case Cancel, Expire:
		s.Held, s.Available = s.Held-units, s.Available+units
	case Lost:
		s.Available -= units
	case LostHeld:
		s.Held -= units
	default:
		return s, fmt.Errorf("ledger: unknown kind %q", k)
	}
	return s, nil
}

// Entry is one move of one SKU.
type Entry struct {
	SKU string
	// Pos is the entry's position: it grows along a SKU's history, in the
	// order the moves took effect, and is the cursor of [Reader.Entries].
	// Positions are not dense, and are not an order across SKUs.
	Pos   int64
	Kind  Kind
	Units int64 // at least 1 (Init: the stock set, 0 included)
	// After is the stock after the entry. Available is what the move
	// wrote; Held and Sold are counted from the SKU's first entry (a SKU
	// that had holds before the ledger was kept starts from zero).
	After Stock
	Key   string    // the call's idempotency key ([inventory.WithKey]), or ""
	Ref   string    // the call's reference ([inventory.WithRef]), or ""
	Hold  string    // the hold id of Reserve, Confirm, Cancel and Expire entries, or ""
	Time  time.Time // when the move took effect, on the backend's clock
}

// Reader reads a Manager's ledger.
type Reader interface {
	// Entries returns up to limit entries of sku with a position greater
	// than after, in order: after 0 starts at the first. Fewer than limit
	// (none included) means there are no more for now. A SKU never moved
	// has no entries (no error). limit must be 1..MaxPage.
	//
	// Errors: [inventory.ErrInvalidArgument] (a bad SKU, a limit out of
	// range, a negative after), [ErrNotKept], backend errors, wrapped.
	Entries(ctx context.Context, sku string, after int64, limit int) ([]Entry, error)
}

// MaxPage is the largest limit of [Reader.Entries].
const MaxPage = 1000

// CheckPage returns the error of Entries for a limit or cursor out of
// range, wrapping [inventory.ErrInvalidArgument], or nil.
func CheckPage(after int64, limit int) error {
	if limit < 1 || limit > MaxPage {
		return fmt.Errorf("%w: ledger page limit %d outside 1..%d", inventory.ErrInvalidArgument, limit, MaxPage)
	}
	if after < 0 {
		return fmt.Errorf("%w: ledger position %d is negative", inventory.ErrInvalidArgument, after)
	}
	return nil
}

// History returns an iterator over the entries of sku after position
// after, in order, read from r a page of MaxPage at a time. It stops at
// the first error, which it yields with a zero Entry.
func History(ctx context.Context, r Reader, sku string, after int64) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for {
			page, err := r.Entries(ctx, sku, after, MaxPage)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if len(page) < MaxPage {
				return
			}
			after = page[len(page)-1].Pos
		}
	}
}

// Replay folds entries, one SKU's history from its first entry, into the
// stock they lead to. It fails at the first entry that does not follow
// from the ones before it: a position that does not grow, a unit count
// below 1 (0 for Init), or an After that is not the stock before it moved
// by the entry (for Init, Available is Units). A move missing from the
// ledger shows there as a jump of Available.
func Replay(entries iter.Seq2[Entry, error]) (Stock, error) {
	var s Stock
	var last int64
	n := 0
	for e, err := range entries {
		if err != nil {
			return s, err
		}
		switch {
		case e.Pos <= last:
			return s, fmt.Errorf("ledger: entry %d of %q: position %d after %d", n, e.SKU, e.Pos, last)
		case e.Units < 1 && !(e.Kind == Init && e.Units == 0):
			return s, fmt.Errorf("ledger: entry %d of %q (position %d): %s of %d units", n, e.SKU, e.Pos, e.Kind, e.Units)
		}
		next, err := s.Apply(e.Kind, e.Units)
		if err != nil {
			return s, fmt.Errorf("entry %d of %q (position %d): %w", n, e.SKU, e.Pos, err)
		}
		if next != e.After {
			return s, fmt.Errorf("ledger: entry %d of %q (position %d, %s %d): after %+v, but the entries before it lead to %+v",
				n, e.SKU, e.Pos, e.Kind, e.Units, e.After, next)
		}
		s, last = next, e.Pos
		n++
	}
	return s, nil
}

// Check replays the whole history of sku in r ([Replay]) and compares it
// with the stock m reads back: Available with m.Get and, when m is an
// [inventory.OrderManager], Held with m.Held. It is meant for a SKU that
// no call is moving meanwhile, whose every move since its first Init was
// made with the ledger kept. The error says what differs.
func Check(ctx context.Context, r Reader, m inventory.StockManager, sku string) (Stock, error) {
	s, err := Replay(History(ctx, r, sku, 0))
	if err != nil {
		return s, err
	}
	avail, err := m.Get(ctx, sku)
	if err != nil {
		return s, err
	}
	if avail != s.Available {
		return s, fmt.Errorf("ledger: %q: the ledger replays to %d available, Get reads %d", sku, s.Available, avail)
	}
	if om, ok := m.(inventory.OrderManager); ok {
		held, err := om.Held(ctx, sku)
		if err != nil {
			return s, err
		}
		if held != s.Held {
			return s, fmt.Errorf("ledger: %q: the ledger replays to %d held, Held reads %d", sku, s.Held, held)
		}
	}
	return s, nil
}
