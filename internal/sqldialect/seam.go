package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
)

// The statements of the lock strategies' holds (sqlstore's
// lockmgr.HoldStore): hold lines in the holds table, one per (sku, order
// id), deleted when unheld; order records in the orders table.

// Atomic runs fn in one transaction: a savepoint of caller's when caller
// is not nil, else a transaction of its own (see [Tables.Tx]).
func (t *Tables) Atomic(ctx context.Context, caller *sqlx.Tx, op string, fn func(tx *sqlx.Tx) error) error {
	if caller == nil {
		return t.Tx(ctx, fn)
	}
	return t.savepoint(ctx, caller, op, fn)
}

// savepoint runs fn inside the caller's transaction tx, between SAVEPOINT
// and RELEASE; when fn fails it rolls back to the savepoint, so that a call
// that returns an error leaves the caller's transaction as it found it.
func (t *Tables) savepoint(ctx context.Context, tx *sqlx.Tx, op string, fn func(tx *sqlx.Tx) error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT inventory_call"); err != nil {
		return t.Err(ctx, op+": savepoint", err)
	}
	if err := fn(tx); err != nil {
		// After a deadlock MySQL has rolled the whole transaction back and
		// the savepoint is gone; the error says to retry the transaction.
		_, _ = tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT inventory_call")
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT inventory_call"); err != nil {
		return t.Err(ctx, op+": release savepoint", err)
	}
	return nil
}

// HoldsOf reads in one statement the stock, version and held units of
// sku, and whether it has lines past their expiry; if it has, it then
// reads the ids of up to max of them, earliest expiry first.
func (t *Tables) HoldsOf(ctx context.Context, q sqlx.QueryerContext, sku string, max int) (stock, version, held int64, expired []string, err error) {
	var any bool
	err = q.QueryRowxContext(ctx, t.q.holdsOf, sku).Scan(&stock, &version, &held, &any)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, 0, nil, t.NotFound(sku)
	}
	if err != nil {
		return 0, 0, 0, nil, t.Err(ctx, "read holds", err)
	}
	if any {
		refs, _, err := t.Expired(ctx, q, sku)
		if err != nil {
			return 0, 0, 0, nil, err
		}
		for _, r := range refs[:min(len(refs), max)] {
			expired = append(expired, r.ID)
		}
	}
	return stock, version, held, expired, nil
}

// HoldLine records the line (sku, id) -> qty, expiring at expires, and
// sets sku's stock to newStock if its version is still version, in one
// transaction (caller's savepoint, or its own). ok=false: the version
// moved or sku is gone, nothing written. An existing line is
// ErrDuplicate.
func (t *Tables) HoldLine(ctx context.Context, caller *sqlx.Tx, sku string, version, newStock int64, id string, qty int64, expires time.Time) (ok bool, err error) {
	err = t.Atomic(ctx, caller, "hold", func(tx *sqlx.Tx) error {
		n, err := rows(tx.ExecContext(ctx, t.q.holdLine, id, sku, qty, expires.UnixMicro()))
		if err != nil {
			return t.Err(ctx, "hold", err)
		}
		if n == 0 {
			return t.Fail("", fmt.Errorf("%w: line %q of order %q", inventory.ErrDuplicate, sku, id))
		}
		ok, err = t.Set(ctx, tx, sku, version, newStock)
		if err == nil && !ok {
			return errStale
		}
		return err
	})
	if errors.Is(err, errStale) {
		return false, nil
	}
	return err == nil, err
}

// errStale rolls back a write whose compare-and-set lost.
var errStale = errors.New("sqldialect: stale version")

// Unhold deletes the line (sku, id) and, unless sold, gives its qty back
// to sku's stock (capped at MaxStock), in one transaction; it returns the
// qty, or 0 when there is no such line.
func (t *Tables) Unhold(ctx context.Context, caller *sqlx.Tx, sku, id string, sold bool) (qty int64, err error) {
	err = t.Atomic(ctx, caller, "unhold", func(tx *sqlx.Tx) error {
		qty = 0
		err := tx.QueryRowxContext(ctx, t.q.lockLine, id, sku).Scan(&qty)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return t.Err(ctx, "unhold", err)
		}
		if _, err := tx.ExecContext(ctx, t.q.dropLine, id, sku); err != nil {
			return t.Err(ctx, "unhold", err)
		}
		if !sold {
			if _, err := tx.ExecContext(ctx, t.q.give, qty, inventory.MaxStock, sku); err != nil {
				return t.Err(ctx, "unhold", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return qty, nil
}

// OrderRow is an order record as the orders table has it; times are Unix
// µs on the database's clock.
type OrderRow struct {
	Lines            []byte // JSON
	State            string
	Expires, Abandon int64
	Complete, Done   bool
	Kept             sql.NullInt64 // until when a done record is kept
	Now              int64         // the database's clock at the read
}

// CreateOrder forgets a done record of id kept past its time, then
// inserts the record, held, expiring ttl from the database's clock now
// and abandoned grace later, and returns it. ok=false: a record of id
// exists.
func (t *Tables) CreateOrder(ctx context.Context, caller *sqlx.Tx, id string, lines []byte, ttl, grace time.Duration) (o OrderRow, ok bool, err error) {
	create := func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, t.q.forgetOrder, id); err != nil {
			return t.Err(ctx, "create order", err)
		}
		abandon := (ttl + grace).Microseconds()
		n, err := rows(tx.ExecContext(ctx, t.q.createOrder, id, lines, ttl.Microseconds(), abandon, abandon))
		if err != nil {
			return t.Err(ctx, "create order", err)
		}
		if ok = n == 1; ok {
			o, _, err = t.ReadOrder(ctx, tx, id, false)
		}
		return err
	}
	if caller == nil && t.Engine == MySQL {
		// At InnoDB's REPEATABLE READ the DELETE of an absent id locks
		// the gap, and concurrent creates inserting into one gap
		// deadlock; READ COMMITTED takes no gap locks.
		err = t.txWith(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, create)
	} else {
		err = t.Atomic(ctx, caller, "create order", create)
	}
	return o, ok, err
}

// ReadOrder reads the record of id through q, with lock FOR UPDATE (on
// SQLite, the transaction's write lock does it).
func (t *Tables) ReadOrder(ctx context.Context, q sqlx.QueryerContext, id string, lock bool) (o OrderRow, found bool, err error) {
	stmt := t.q.order
	if lock {
		stmt = t.q.lockOrder
	}
	var complete, done int64
	err = q.QueryRowxContext(ctx, stmt, id).Scan(&o.Lines, &o.State, &o.Expires, &o.Abandon, &complete, &done, &o.Kept, &o.Now)
	if errors.Is(err, sql.ErrNoRows) {
		return OrderRow{}, false, nil
	}
	if err != nil {
		return OrderRow{}, false, t.Err(ctx, "read order", err)
	}
	o.Complete, o.Done = complete != 0, done != 0
	return o, true, nil
}

// SetOrder writes the record of id: state, flags, due time and kept time.
func (t *Tables) SetOrder(ctx context.Context, e sqlx.ExecerContext, id string, o OrderRow, due int64) error {
	if _, err := e.ExecContext(ctx, t.q.setOrder, o.State, b2i(o.Complete), b2i(o.Done), due, o.Kept, id); err != nil {
		return t.Err(ctx, "update order", err)
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// DropOrder deletes the record of id.
func (t *Tables) DropOrder(ctx context.Context, e sqlx.ExecerContext, id string) error {
	if _, err := e.ExecContext(ctx, t.q.dropOrder, id); err != nil {
		return t.Err(ctx, "delete order", err)
	}
	return nil
}

// DueOrders returns the ids of up to max records not done and due,
// earliest first.
func (t *Tables) DueOrders(ctx context.Context, q sqlx.QueryerContext, max int) ([]string, error) {
	var ids []string
	if err := sqlx.SelectContext(ctx, q, &ids, t.q.dueOrders, max); err != nil {
		return nil, t.Err(ctx, "read due orders", err)
	}
	return ids, nil
}

// PruneOrders deletes up to 1000 done records kept past their time.
func (t *Tables) PruneOrders(ctx context.Context) (int64, error) {
	n, err := rows(t.DB.ExecContext(ctx, t.q.pruneOrders))
	if err != nil {
		return 0, t.Err(ctx, "prune orders", err)
	}
	return n, nil
}
