package sqlengine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

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

// ledgerKey is a key of a SKU's ledger.
type ledgerKey struct {
	dir driver.Direction
	key string
}

// Apply computes the steps of sku in order from stock (the units of the
// expired holds the write releases included) and entries, the ledger rows
// of the steps' keys ([Tables.Entries]; nil if none was read): a step
// whose key has an unexpired row, or was used by an earlier step of the
// batch, is a duplicate, with that call's remaining; a step the stock does
// not let through is refused, with the stock then; any other moves the
// stock. It returns each step's outcome, the stock after the batch, the
// ledger rows to write ([Tables.RecordAll]), whether any step moved the
// stock, and whether any was refused for want of stock.
func Apply(t *Tables, sku string, stock int64, entries []Entry, steps []Step) (out []Outcome, after int64, records []Entry, moved, short bool) {
	seen := make(map[ledgerKey]Entry, len(entries))
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
			seen[k] = Entry{Dir: s.Dir, Key: s.Key, Remaining: cur}
			records = append(records, Entry{Dir: s.Dir, Key: s.Key, Remaining: cur, Expired: expired})
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
// usually read them first, see [Tables.Precheck]), so the batch reads them only
// when a keyed step is refused; when the ledger INSERT finds one there
// after all, the transaction rolls back and the batch is tried again,
// reading them under the lock. So a lone call makes the round trips of
// [Orders.Move].
func (o *Orders) MoveBatch(ctx context.Context, sku string, steps []Step) ([]Outcome, error) {
	var (
		out      []Outcome
		records  []Entry
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
	records []Entry) (ok bool, err error) {
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

// errConflict rolls back an attempt that lost to another writer.
var errConflict = errors.New("sqldialect: conflict")

// shot carries a lock-wait outcome out of an attempt.
type shot struct {
	lockCtx context.Context
	gaveUp  bool // a lock statement ended because lockCtx did
}

// run runs fn in a transaction: the caller's (in a savepoint) or one of its
// own, tried up to Attempts times while it returns errConflict. read, if
// not nil, runs before each attempt's transaction, through the pool or
// the caller's transaction; its error ends the call with no transaction.
func (o *Orders) run(ctx context.Context, caller *sqlx.Tx, op string, read func(ctx context.Context, q sqlx.QueryerContext) error,
	fn func(ctx context.Context, s *shot, tx *sqlx.Tx) error) error {
	if caller != nil {
		lockCtx, cancel := o.lockCtx(ctx)
		defer cancel()
		if read != nil {
			if err := read(ctx, caller); err != nil {
				return err
			}
		}
		s := &shot{lockCtx: lockCtx}
		err := o.T.Atomic(ctx, caller, op, func(tx *sqlx.Tx) error { return fn(ctx, s, tx) })
		if err != nil && s.gaveUp && !errors.Is(err, inventory.ErrContention) {
			return o.T.Fail(op, fmt.Errorf("%w: no lock within %v: %w", inventory.ErrContention, o.LockWait, err))
		}
		if errors.Is(err, errConflict) {
			return o.T.Fail(op, fmt.Errorf("%w: another writer moved a row it read; roll back and retry the transaction", inventory.ErrContention))
		}
		return err
	}
	pause := o.Base
	for attempt := 1; ; attempt++ {
		var err error
		if read != nil {
			err = read(ctx, o.T.DB)
		}
		if err == nil {
			err = o.own(ctx, fn)
		}
		if !errors.Is(err, errConflict) {
			return err
		}
		if attempt >= o.Attempts {
			return o.T.Fail(op, fmt.Errorf("%w after %d attempts", inventory.ErrContention, attempt))
		}
		pause = o.Pause(pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return o.T.Err(ctx, op, ctx.Err())
		case <-t.C:
		}
	}
}

// Pause returns the decorrelated-jitter pause after prev: drawn from Base
// up to three times prev, capped at Cap.
func (o *Orders) Pause(prev time.Duration) time.Duration {
	return min(o.Cap, o.Base+rand.N(max(3*prev, o.Base+1)-o.Base))
}

// lockCtx bounds one call's lock statements: twice the server's own bound.
func (o *Orders) lockCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if o.LockWait <= 0 || o.T.Engine == sqldialect.SQLite {
		return ctx, func() {}
	}
	bound := o.LockWait
	if o.T.Engine == sqldialect.MySQL {
		bound = (o.LockWait + time.Second - 1).Truncate(time.Second)
	}
	return context.WithTimeout(ctx, 2*bound)
}

// own runs fn in a transaction of its own, with the lock wait bounds.
func (o *Orders) own(ctx context.Context, fn func(ctx context.Context, s *shot, tx *sqlx.Tx) error) error {
	txCtx := ctx
	if o.LockWait > 0 && o.T.Engine == sqldialect.SQLite {
		var cancel context.CancelFunc
		txCtx, cancel = context.WithTimeout(ctx, o.LockWait)
		defer cancel()
	}
	lockCtx, cancel := o.lockCtx(txCtx)
	defer cancel()
	s := &shot{lockCtx: lockCtx}
	tx, err := o.T.Begin(txCtx, nil)
	if err == nil {
		err = o.T.End(txCtx, tx, fn(txCtx, s, tx))
	}
	if err != nil && ctx.Err() == nil && (s.gaveUp || txCtx.Err() != nil) && !errors.Is(err, inventory.ErrContention) {
		return o.T.Fail("", fmt.Errorf("%w: no lock within %v: %w", inventory.ErrContention, o.LockWait, err))
	}
	return err
}

// row is one SKU of a call as the call found it, with the expired lines it
// releases.
type row struct {
	Row
	refs  []Ref
	units int64 // of refs
}

// rows reads or locks the rows of skus (sorted, distinct) and their expired
// lines: with lock, through tx, with FOR UPDATE in order; otherwise through
// q in one statement.
func (o *Orders) rows(ctx context.Context, s *shot, q sqlx.QueryerContext, tx *sqlx.Tx, skus []string, lock bool) (map[string]*row, error) {
	out := make(map[string]*row, len(skus))
	if lock {
		for _, sku := range skus {
			r, err := o.stock().LockHolds(s.lockCtx, tx, sku)
			if err != nil {
				s.gaveUp = s.lockCtx.Err() != nil && ctx.Err() == nil
				return nil, err
			}
			out[sku] = &row{Row: r}
		}
		q = tx // every row locked: now plain reads see the latest holds
		if o.AfterLock != nil {
			o.AfterLock(skus)
		}
	} else {
		rs, err := o.T.ReadHolds(ctx, q, skus)
		if err != nil {
			return nil, err
		}
		for _, sku := range skus {
			r, ok := rs[sku]
			if !ok {
				return nil, o.T.NotFound(sku)
			}
			out[sku] = &row{Row: r}
		}
	}
	for _, sku := range skus {
		if r := out[sku]; r.Expired {
			var err error
			if r.refs, r.units, err = o.T.Expired(ctx, q, sku); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// write sets sku's row to stock, releasing its expired lines, through tx.
func (o *Orders) write(ctx context.Context, tx *sqlx.Tx, sku string, r *row, stock int64) error {
	ok, err := o.stock().Set(ctx, tx, sku, r.Version, stock)
	if err == nil && ok {
		ok, err = o.T.Release(ctx, tx, sku, r.refs)
	}
	if err == nil && !ok {
		err = errConflict
	}
	return err
}

// batchMoves returns the entries of a batch of sku whose row r was
// written: its expired lines, then every step that took effect.
func batchMoves(sku string, r *row, steps []Step, out []Outcome) []Move {
	ms, _ := Expires(make([]Move, 0, len(r.refs)+len(steps)), sku, r.refs, r.Stock)
	for i, s := range steps {
		if out[i].Err == nil {
			ms = append(ms, Move{SKU: sku, Kind: KindOf(s.Dir), Units: s.Qty, Available: out[i].Remaining, Key: s.Key, Ref: s.Ref})
		}
	}
	return ms
}
