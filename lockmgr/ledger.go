package lockmgr

import (
	"context"
	"strings"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/ledger"
)

// The movement ledger (package ledger) of a lock strategy is kept by its
// Store: a [LedgerStore] made with its WithLedger option writes each
// entry in the atomic step of the write it records (sqlstore: the write's
// transaction; redisstore: the write's script). The Manager only says what
// a write is, in a [Note] in the write's ctx, and reads the entries back
// through the Store (Manager.Entries).

// LedgerStore is a [Store] that can keep a movement ledger: when
// KeepsLedger reports true, every write of stock records its entries (see
// [Note]) in the same atomic step as the write, Init included (an entry of
// kind init), and Entries reads them back (it fails with an error wrapping
// [ledger.ErrNotKept] when KeepsLedger is false). sqlstore.Store and
// redisstore.Store implement it. A [Manager] over a LedgerStore that keeps
// a ledger is a [ledger.Reader]; over any other Store, its Entries fails
// with [ledger.ErrNotKept].
type LedgerStore interface {
	Store
	ledger.Reader
	// KeepsLedger reports whether the Store keeps a movement ledger. It
	// does no I/O and never changes for a Store.
	KeepsLedger() bool
}

// Note is what the entry of a Store's write records beyond what the write
// itself says. The Manager of a [LedgerStore] that keeps a ledger passes
// one in the ctx of each CompareAndSet, Hold and Unhold (read it with
// [NoteOf]); the entry's stock after it is the stock the write leaves, and
// its units:
//   - CompareAndSet: Units (the Manager's quantity); Kind is reduce or
//     return.
//   - Hold: the line's qty; Kind is reserve (Hold names the hold), or
//     reduce for a line of ReduceLines (with the call's Key and Ref).
//   - Unhold: the line's qty, when there was a line; Kind is confirm,
//     cancel or expire (a hold's line), return (a line of ReduceLines
//     given back), or "": record nothing (a line of ReduceLines sold,
//     whose reduce entry its Hold recorded).
//
// A write whose ctx carries no Note (a caller of the Store's methods
// without a Manager) records what the write says on its own: for
// CompareAndSet, reduce or return of the difference, with the key and
// the ctx's reference ([driver.Ref]); for Hold, reserve of the order id;
// for Unhold, confirm when sold and cancel otherwise, of the order id.
type Note struct {
	Kind  ledger.Kind
	Units int64
	Key   string // the call's idempotency key ([inventory.WithKey]), or ""
	Ref   string // the call's reference ([inventory.WithRef]), or ""
	Hold  string // the hold id (not the order id) of a hold's entry, or ""
}

type noteKey struct{}

// WithNote returns ctx carrying n for [NoteOf].
func WithNote(ctx context.Context, n Note) context.Context {
	return context.WithValue(ctx, noteKey{}, n)
}

// NoteOf returns the Note of the write whose ctx is ctx, and whether it
// has one.
func NoteOf(ctx context.Context) (Note, bool) {
	n, ok := ctx.Value(noteKey{}).(Note)
	return n, ok
}

// note returns ctx carrying n when the Manager's Store keeps a ledger, and
// ctx itself (no allocation) when it does not.
func (m *Manager) note(ctx context.Context, n Note) context.Context {
	if m.ledger == nil {
		return ctx
	}
	return WithNote(ctx, n)
}

// moveKind is the ledger kind of a move in dir.
func moveKind(dir driver.Direction) ledger.Kind {
	if dir == driver.DirReturn {
		return ledger.Return
	}
	return ledger.Reduce
}

// holdNote is the Note of a Hold of a line of order id, made by the call
// whose ctx is ctx.
func holdNote(ctx context.Context, id string) Note {
	if h, ok := strings.CutPrefix(id, kindHold); ok {
		return Note{Kind: ledger.Reserve, Hold: h}
	}
	key, _ := strings.CutPrefix(id, kindReduceKey) // x: ids have no key
	if key == id {
		key = ""
	}
	return Note{Kind: ledger.Reduce, Key: key, Ref: driver.Ref(ctx)}
}

// unholdNote is the Note of an Unhold of a line of order id in state
// state (OrderHeld: a Reserve giving back what it took), sold or not. ref
// is the reference of the call that made the order, when it is that call
// giving its lines back; "" otherwise.
func unholdNote(id string, state OrderState, sold bool, ref string) Note {
	if h, ok := strings.CutPrefix(id, kindHold); ok {
		switch {
		case sold:
			return Note{Kind: ledger.Confirm, Hold: h}
		case state == OrderCancelled:
			return Note{Kind: ledger.Cancel, Hold: h}
		}
		return Note{Kind: ledger.Expire, Hold: h} // expired, or a Reserve that gave up
	}
	if sold || !strings.HasPrefix(id, kindReduceKey) && !strings.HasPrefix(id, kindReduce) {
		return Note{} // sold: recorded by its Hold; a ReturnLines record holds no lines
	}
	key, _ := strings.CutPrefix(id, kindReduceKey)
	if key == id {
		key = ""
	}
	return Note{Kind: ledger.Return, Key: key, Ref: ref}
}

var _ ledger.Reader = (*Manager)(nil)

// Entries implements [ledger.Reader]: it reads the ledger its Store keeps.
// The error wraps [ledger.ErrNotKept] when the Store is no [LedgerStore]
// or keeps no ledger.
func (m *Manager) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	err := driver.ValidateSKU(sku)
	if err == nil {
		err = ledger.CheckPage(after, limit)
	}
	if err != nil {
		return nil, &front.Error{Strategy: m.name, Op: "entries", Err: err}
	}
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case m.ledger == nil:
		err = ledger.ErrNotKept
	default:
		var es []ledger.Entry
		if es, err = m.ledger.Entries(ctx, sku, after, limit); err == nil {
			return es, nil
		}
	}
	return nil, &front.Error{Strategy: m.name, Op: "entries", Subject: sku, Err: err}
}
