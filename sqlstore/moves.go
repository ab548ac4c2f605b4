package sqlstore

import (
	"context"
	"errors"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
)

// The movement ledger (package ledger), with WithLedger: the table of
// optimistic's and rowlock's WithLedger (the stock table's name followed
// by "_moves"), written by the transaction of each write of stock, after
// the stock row (so while the row is locked), with what the Manager says
// of the write in its ctx (lockmgr.Note). Without WithLedger nothing here
// runs.

// WithLedger makes the Store keep the movement ledger of package
// [github.com/stockkit/inventory/ledger], in the table that optimistic's
// and rowlock's WithLedger keep (see docs/ledger.md, "Storage (SQL)"):
// every write of stock (Init, CompareAndSet, Hold, Unhold) records its
// entry in the write's own transaction, the caller's where [Store.InTx]
// is used, so a lock strategy over the Store (a [lockmgr.Manager]) is a
// [ledger.Reader]. [Store.CreateTables] creates the table. What an entry
// records (its kind, key, reference and hold id) is the [lockmgr.Note]
// the Manager passes in the write's ctx.
func WithLedger() Option { return func(c *config) { c.moves = true } }

var _ lockmgr.LedgerStore = (*Store)(nil)

// KeepsLedger implements [lockmgr.LedgerStore]: whether s was made with
// [WithLedger].
func (s *Store) KeepsLedger() bool { return s.t.Ledgered() }

// Entries implements [ledger.Reader]: a page of the movement ledger of
// sku. The error wraps [ledger.ErrNotKept] unless s was made with
// [WithLedger].
func (s *Store) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	err := driver.ValidateSKU(sku)
	if err == nil {
		err = ledger.CheckPage(after, limit)
	}
	if err != nil {
		return nil, &front.Error{Strategy: "sqlstore", Op: "entries", Err: err}
	}
	return s.t.ReadMoves(ctx, s.q(), sku, after, limit)
}

// initMoved is Init with its entry, in one transaction.
func (s *Store) initMoved(ctx context.Context, sku string, qty int64) error {
	return s.t.Atomic(ctx, s.tx, "init", func(tx *sqlx.Tx) error {
		if err := s.t.InitOn(ctx, tx, sku, qty); err != nil {
			return err
		}
		return s.t.WriteMoves(ctx, tx, []sqlengine.Move{{SKU: sku, Kind: ledger.Init, Units: qty, Available: qty}})
	})
}

// casMoved is CompareAndSet with its entry, in one transaction. Without a
// Note in ctx the units are the difference from the stock at version,
// read first in the transaction.
func (s *Store) casMoved(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (ok bool, err error) {
	err = s.t.Atomic(ctx, s.tx, "compare-and-set", func(tx *sqlx.Tx) error {
		n, noted := lockmgr.NoteOf(ctx)
		if !noted {
			var found bool
			if n, found, err = noteOfSet(ctx, s.t, tx, sku, version, newStock, dir, key); err != nil || !found {
				return err
			}
		}
		if ok, err = s.t.Set(ctx, tx, sku, version, newStock); err != nil || !ok {
			return err
		}
		if key != "" {
			if err := s.t.Record(ctx, tx, sku, dir, key, newStock); err != nil {
				return err
			}
		}
		if n.Kind == "" || n.Units == 0 {
			return nil
		}
		return s.t.WriteMoves(ctx, tx, []sqlengine.Move{moveOf(n, sku, newStock)})
	})
	if err != nil {
		return false, err
	}
	if ok && key != "" {
		s.t.Tidy(ctx, 1)
	}
	return ok, nil
}

// noteOfSet is the Note of a compare-and-set of sku from version to
// newStock made without a Manager: found=false when sku is at another
// version or gone (the write will not take).
func noteOfSet(ctx context.Context, t *sqlengine.Tables, tx *sqlx.Tx, sku string, version, newStock int64, dir driver.Direction, key string) (n lockmgr.Note, found bool, err error) {
	cur, v, err := t.Read(ctx, tx, sku)
	if errors.Is(err, inventory.ErrNotFound) || err == nil && v != version {
		return n, false, nil
	}
	if err != nil {
		return n, false, err
	}
	return lockmgr.Note{Kind: sqlengine.KindOf(dir), Units: max(cur-newStock, newStock-cur), Key: key, Ref: driver.Ref(ctx)}, true, nil
}

// moveOf is the entry n of sku, the stock after it available.
func moveOf(n lockmgr.Note, sku string, available int64) sqlengine.Move {
	return sqlengine.Move{SKU: sku, Kind: n.Kind, Units: n.Units, Available: available, Key: n.Key, Ref: n.Ref, Hold: n.Hold}
}

// holdMove is the entry of a Hold of qty units of sku under order id that
// leaves newStock, or nil without a ledger.
func (s *Store) holdMove(ctx context.Context, sku, id string, qty, newStock int64) *sqlengine.Move {
	if !s.t.Ledgered() {
		return nil
	}
	n, ok := lockmgr.NoteOf(ctx)
	if !ok {
		n = lockmgr.Note{Kind: ledger.Reserve, Hold: id}
	}
	if n.Kind == "" {
		return nil
	}
	n.Units = qty
	mv := moveOf(n, sku, newStock)
	return &mv
}

// unholdMove is the entry of an Unhold of sku's line of order id (its
// units and the stock after it left to the write), or nil without a
// ledger or when the Note says to record nothing.
func (s *Store) unholdMove(ctx context.Context, sku, id string, sold bool) *sqlengine.Move {
	if !s.t.Ledgered() {
		return nil
	}
	n, ok := lockmgr.NoteOf(ctx)
	if !ok {
		n = lockmgr.Note{Kind: ledger.Cancel, Hold: id}
		if sold {
			n.Kind = ledger.Confirm
		}
	}
	if n.Kind == "" {
		return nil
	}
	mv := moveOf(n, sku, 0)
	return &mv
}
