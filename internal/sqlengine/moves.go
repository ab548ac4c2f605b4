package sqlengine

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/ledger"
)

// The movement ledger (package ledger), when the Tables keep one: every
// transaction that moves stock writes its entries with one INSERT
// ([Tables.WriteMoves]) before it commits, after it wrote the
// stock rows it holds, so that the positions of a SKU's entries follow the
// order of its moves. Without a ledger nothing here runs: no statement,
// no allocation.

// KindOf is the ledger kind of a move in dir.
func KindOf(dir driver.Direction) ledger.Kind {
	if dir == driver.DirReturn {
		return ledger.Return
	}
	return ledger.Reduce
}

// Expires appends to ms the entries of refs, the expired lines of sku a
// write releases, the SKU's stock before them being base, and returns
// the stock after them.
func Expires(ms []Move, sku string, refs []Ref, base int64) ([]Move, int64) {
	for _, r := range refs {
		base += r.Qty
		ms = append(ms, Move{SKU: sku, Kind: ledger.Expire, Units: r.Qty, Available: base, Hold: r.ID})
	}
	return ms, base
}

// Init sets the stock of sku to qty through the pool, or in a savepoint
// of caller's when caller is not nil; with a ledger, in one transaction
// with its entry.
func (o *Orders) Init(ctx context.Context, caller *sqlx.Tx, sku string, qty int64) error {
	if !o.T.Ledgered() {
		if caller != nil {
			return o.T.InitOn(ctx, caller, sku, qty)
		}
		return o.T.Init(ctx, sku, qty)
	}
	return o.T.Atomic(ctx, caller, "init", func(tx *sqlx.Tx) error {
		if err := o.T.InitOn(ctx, tx, sku, qty); err != nil {
			return err
		}
		return o.T.WriteMoves(ctx, tx, []Move{{SKU: sku, Kind: ledger.Init, Units: qty, Available: qty}})
	})
}

// Entries implements [ledger.Reader] for optimistic and rowlock: it
// checks the arguments before any I/O and reads through the pool.
func (o *Orders) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	err := driver.ValidateSKU(sku)
	if err == nil {
		err = ledger.CheckPage(after, limit)
	}
	if err != nil {
		return nil, &front.Error{Strategy: o.T.Pkg(), Op: "entries", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, o.T.Err(ctx, "entries", err)
	}
	return o.T.ReadMoves(ctx, o.T.DB, sku, after, limit)
}
