package sqlengine

import (
	"context"
	"errors"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect"
)

// Step is one Reduce or Return of a batch of one SKU's calls, which
// optimistic and rowlock apply together (see [Apply]).
type Step struct {
	Qty int64
	Dir driver.Direction
	Key string // "" for none
	Ref string // the caller's reference, for the movement ledger; "" for none
}

// Outcome is a step's answer: the stock after it, or its error with the
// stock it saw (a refusal) or the first call's remaining (a duplicate).
type Outcome struct {
	Remaining int64
	Err       error
}

// Keys returns the distinct keys of steps, in order.
func Keys(steps []Step) []string {
	var keys []string
	for _, s := range steps {
		if s.Key != "" && !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// ledgerKey is a key of a SKU's ledger.
type ledgerKey struct {
	dir driver.Direction
	key string
}

// Apply computes the steps of sku in order from stock (the units of the
// expired holds the write releases included) and entries, the ledger rows
// of the steps' keys ([sqldialect.Tables.Entries]; nil if none was read): a step
// whose key has an unexpired row, or was used by an earlier step of the
// batch, is a duplicate, with that call's remaining; a step the stock does
// not let through is refused, with the stock then; any other moves the
// stock. It returns each step's outcome, the stock after the batch, the
// ledger rows to write ([sqldialect.Tables.RecordAll]), whether any step moved the
// stock, and whether any was refused for want of stock.
func Apply(t *sqldialect.Tables, sku string, stock int64, entries []sqldialect.Entry, steps []Step) (out []Outcome, after int64, records []sqldialect.Entry, moved, short bool) {
	seen := make(map[ledgerKey]sqldialect.Entry, len(entries))
	for _, e := range entries {
		seen[ledgerKey{e.Dir, e.Key}] = e
	}
	out = make([]Outcome, len(steps))
	cur := stock
	for i, s := range steps {
		k := ledgerKey{s.Dir, s.Key}
		if e, ok := seen[k]; s.Key != "" && ok && !e.Expired {
			out[i] = Outcome{e.Remaining, t.Duplicate(sku, s.Dir, s.Key)}
			continue
		}
		if err := t.Check(sku, s.Dir, cur, s.Qty); err != nil {
			out[i] = Outcome{cur, err}
			short = short || errors.Is(err, inventory.ErrInsufficientStock)
			continue
		}
		if s.Dir == driver.DirReduce {
			cur -= s.Qty
		} else {
			cur += s.Qty
		}
		out[i], moved = Outcome{Remaining: cur}, true
		if s.Key != "" {
			// Later steps with this key in the batch are its duplicates.
			expired := seen[k].Expired // an expired row to replace
			seen[k] = sqldialect.Entry{Dir: s.Dir, Key: s.Key, Remaining: cur}
			records = append(records, sqldialect.Entry{Dir: s.Dir, Key: s.Key, Remaining: cur, Expired: expired})
		}
	}
	return out, cur, records, moved, short
}

// errUnmoved rolls back a batch transaction that moved nothing.
var errUnmoved = errors.New("sqldialect: nothing moved")

// MoveBatch applies steps, Reduce and Return calls of sku, in order, in
// one transaction of its own: it locks the row (FOR UPDATE with the lock
// wait; on SQLite the write lock), releases the SKU's expired holds,
// computes every step ([Apply]), writes the stock once, the
// ledger rows of the keyed steps that moved and, with a movement ledger,
// the entries of the expired holds and the steps that moved (one INSERT),
// and commits. A batch in which
// no step moves writes nothing. A non-nil error is the whole batch's:
// nothing changed.
//
// The steps' keys are taken to be absent from the ledger (the callers
// usually read them first, see [sqldialect.Tables.Precheck]), so the batch reads them only
// when a keyed step is refused; when the ledger INSERT finds one there
// after all, the transaction rolls back and the batch is tried again,
// reading them under the lock. So a lone call makes the round trips of
// [Orders.Move].
func (o *Orders) MoveBatch(ctx context.Context, sku string, steps []Step) ([]Outcome, error) {
	var (
		out      []Outcome
		records  []sqldialect.Entry
		readKeys bool
	)
	err := o.run(ctx, nil, string(steps[0].Dir), nil, func(ctx context.Context, s *shot, tx *sqlx.Tx) error {
		rs, err := o.rows(ctx, s, nil, tx, []string{sku}, true)
		if err != nil {
			return err
		}
		r := rs[sku]
		var after int64
		var moved bool
		out, after, records, moved, _ = Apply(o.T, sku, r.Stock+r.units, nil, steps)
		if readKeys || refusedKeyed(steps, out) {
			// A refused keyed call may be the retry of one that took
			// effect meanwhile (its key was absent when read): it reports
			// the duplicate it is, with the first call's remaining.
			entries, err := o.T.Entries(ctx, tx, sku, Keys(steps))
			if err != nil {
				return err
			}
			out, after, records, moved, _ = Apply(o.T, sku, r.Stock+r.units, entries, steps)
		}
		if !moved {
			for i := range out {
				if !errors.Is(out[i].Err, inventory.ErrDuplicate) {
					out[i].Remaining = r.Stock // what Get shows: nothing was released
				}
			}
			return errUnmoved
		}
		ok, err := o.writeBatch(ctx, tx, sku, r, after, steps, out, records)
		if err == nil && !ok {
			readKeys, err = true, errConflict // a key is in the ledger: again, reading them
		}
		return err
	})
	switch {
	case errors.Is(err, errUnmoved):
		return out, nil
	case err != nil:
		return nil, err
	}
	o.T.Tidy(ctx, len(records))
	return out, nil
}

// writeBatch writes a batch's outcome through tx: the stock, with the
// expired holds released, the movement ledger's entries and the ledger
// rows of the keys. ok=false: a key was in the ledger already.
func (o *Orders) writeBatch(ctx context.Context, tx *sqlx.Tx, sku string, r *row, after int64, steps []Step, out []Outcome,
	records []sqldialect.Entry) (ok bool, err error) {
	if err := o.write(ctx, tx, sku, r, after); err != nil {
		return false, err
	}
	if o.T.Ledgered() {
		if err := o.T.WriteMoves(ctx, tx, batchMoves(sku, r, steps, out)); err != nil {
			return false, err
		}
	}
	if len(records) == 0 {
		return true, nil
	}
	return o.T.RecordAll(ctx, tx, sku, records)
}

// refusedKeyed reports whether a keyed step was refused (not as a
// duplicate of an earlier step, whose own key the ledger INSERT checks).
func refusedKeyed(steps []Step, out []Outcome) bool {
	for i, s := range steps {
		if s.Key != "" && out[i].Err != nil && !errors.Is(out[i].Err, inventory.ErrDuplicate) {
			return true
		}
	}
	return false
}
