package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
)

// The statements of a Store's holds (lockmgr.HoldStore): hold lines in the
// holds table, one per (sku, order id), deleted when unheld; order records
// in the orders table. Each engine's are written out whole, as
// text/template text over the schema's quoted names and the database's
// clock ({{.Now}}, Unix microseconds), which [sqlengine.Tables.Render]
// builds; testdata/statements.golden shows them for the default schema.
// The tables themselves are sqlengine's (Tables.CreateTables).

// holdStatements is one engine's statements of [holds].
type holdStatements struct {
	holdsOf, holdLine, lockLine, dropLine, give                     string
	createOrder, order, lockOrder, setOrder, dropOrder, forgetOrder string
	dueOrders, pruneOrders                                          string
}

// sharedHoldSQL is the statements the engines have in common: each
// engine's (holdSQL) are these with those it writes otherwise.
var sharedHoldSQL = holdStatements{
	holdsOf: `SELECT t.{{.Stock}}, t.{{.Version}},
				(SELECT COALESCE(SUM(h.qty), 0) FROM {{.Holds}} h WHERE h.sku = t.{{.SKU}} AND h.state = 'held'),
				EXISTS (SELECT 1 FROM {{.Holds}} h
					WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
			FROM {{.Table}} t WHERE t.{{.SKU}} = ?`,
	holdLine: `INSERT INTO {{.Holds}} (hold_id, sku, qty, state, expires_at) VALUES (?, ?, ?, 'held', ?)
			ON CONFLICT DO NOTHING`,
	lockLine: `SELECT qty FROM {{.Holds}} WHERE hold_id = ? AND sku = ? AND state = 'held'
			FOR UPDATE`,
	dropLine: `DELETE FROM {{.Holds}} WHERE hold_id = ? AND sku = ?`,
	give: `UPDATE {{.Table}} SET {{.Stock}} = LEAST({{.Stock}} + ?, ?), {{.Version}} = {{.Version}} + 1
			WHERE {{.SKU}} = ?`,
	createOrder: `INSERT INTO {{.Orders}} (id, order_lines, state, expires_at, abandon_at, due_at, complete, done)
			VALUES (?, ?, 'held', {{.Now}} + ?, {{.Now}} + ?, {{.Now}} + ?, 0, 0)
			ON CONFLICT DO NOTHING`,
	order: `SELECT order_lines, state, expires_at, abandon_at, complete, done, kept_until, {{.Now}} FROM {{.Orders}}
			WHERE id = ?`,
	lockOrder: `SELECT order_lines, state, expires_at, abandon_at, complete, done, kept_until, {{.Now}} FROM {{.Orders}}
			WHERE id = ?
			FOR UPDATE`,
	setOrder: `UPDATE {{.Orders}} SET state = ?, complete = ?, done = ?, due_at = ?, kept_until = ?
			WHERE id = ?`,
	dropOrder:   `DELETE FROM {{.Orders}} WHERE id = ?`,
	forgetOrder: `DELETE FROM {{.Orders}} WHERE id = ? AND done = 1 AND kept_until <= {{.Now}}`,
	dueOrders: `SELECT id FROM {{.Orders}} WHERE done = 0 AND due_at <= {{.Now}}
			ORDER BY due_at LIMIT ?`,
}

// holdSQL returns the statements of engine e. MariaDB/MySQL has INSERT
// IGNORE where the others have ON CONFLICT DO NOTHING, no bounded DELETE
// but LIMIT (PostgreSQL goes through ctid, SQLite through rowid), and
// SQLite, without row locks, locks with an UPDATE that changes nothing
// (see sqldialect's sqlite.go).
func holdSQL(e sqldialect.Engine) holdStatements {
	q := sharedHoldSQL
	switch e {
	case sqldialect.MySQL:
		q.holdLine = `INSERT IGNORE INTO {{.Holds}} (hold_id, sku, qty, state, expires_at) VALUES (?, ?, ?, 'held', ?)`
		q.createOrder = `INSERT IGNORE INTO {{.Orders}} (id, order_lines, state, expires_at, abandon_at, due_at, complete, done)
			VALUES (?, ?, 'held', {{.Now}} + ?, {{.Now}} + ?, {{.Now}} + ?, 0, 0)`
		q.pruneOrders = `DELETE FROM {{.Orders}} WHERE done = 1 AND kept_until <= {{.Now}} LIMIT 1000`
	case sqldialect.Postgres:
		q.holdsOf = strings.Replace(q.holdsOf, "COALESCE(SUM(h.qty), 0)", "COALESCE(SUM(h.qty), 0)::BIGINT", 1)
		q.pruneOrders = `DELETE FROM {{.Orders}}
			WHERE ctid = ANY(ARRAY(SELECT ctid FROM {{.Orders}} WHERE done = 1 AND kept_until <= {{.Now}} LIMIT 1000))`
	case sqldialect.SQLite:
		q.lockLine = `UPDATE {{.Holds}} SET qty = qty WHERE hold_id = ? AND sku = ? AND state = 'held'
			RETURNING qty`
		q.give = strings.Replace(q.give, "LEAST(", "MIN(", 1)
		q.lockOrder = `UPDATE {{.Orders}} SET id = id WHERE id = ?
			RETURNING order_lines, state, expires_at, abandon_at, complete, done, kept_until, {{.Now}}`
		q.pruneOrders = `DELETE FROM {{.Orders}}
			WHERE rowid IN (SELECT rowid FROM {{.Orders}} WHERE done = 1 AND kept_until <= {{.Now}} LIMIT 1000)`
	}
	return q
}

// holds runs a Store's hold statements over t's schema.
type holds struct {
	t *sqlengine.Tables
	q holdStatements
}

// newHolds builds the hold statements of t's engine over t's schema.
func newHolds(t *sqlengine.Tables) *holds {
	src := holdSQL(t.Engine)
	h := &holds{t: t}
	for _, f := range []struct{ dst, src *string }{
		{&h.q.holdsOf, &src.holdsOf}, {&h.q.holdLine, &src.holdLine}, {&h.q.lockLine, &src.lockLine},
		{&h.q.dropLine, &src.dropLine}, {&h.q.give, &src.give}, {&h.q.createOrder, &src.createOrder},
		{&h.q.order, &src.order}, {&h.q.lockOrder, &src.lockOrder}, {&h.q.setOrder, &src.setOrder},
		{&h.q.dropOrder, &src.dropOrder}, {&h.q.forgetOrder, &src.forgetOrder}, {&h.q.dueOrders, &src.dueOrders},
		{&h.q.pruneOrders, &src.pruneOrders},
	} {
		*f.dst = t.Render(*f.src)
	}
	return h
}

// HoldsOf reads in one statement the stock, version and held units of
// sku, and whether it has lines past their expiry; if it has, it then
// reads the ids of up to max of them, earliest expiry first.
func (h *holds) HoldsOf(ctx context.Context, q sqlx.QueryerContext, sku string, max int) (stock, version, held int64, expired []string, err error) {
	var any bool
	err = q.QueryRowxContext(ctx, h.q.holdsOf, sku).Scan(&stock, &version, &held, &any)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, 0, nil, h.t.NotFound(sku)
	}
	if err != nil {
		return 0, 0, 0, nil, h.t.Err(ctx, "read holds", err)
	}
	if any {
		refs, _, err := h.t.Expired(ctx, q, sku)
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
// transaction (caller's savepoint, or its own), with mv, if not nil, in
// the movement ledger. ok=false: the version moved or sku is gone, nothing
// written. An existing line is ErrDuplicate.
func (h *holds) HoldLine(ctx context.Context, caller *sqlx.Tx, sku string, version, newStock int64, id string, qty int64, expires time.Time, mv *sqlengine.Move) (ok bool, err error) {
	err = h.t.Atomic(ctx, caller, "hold", func(tx *sqlx.Tx) error {
		n, err := sqlengine.Rows(tx.ExecContext(ctx, h.q.holdLine, id, sku, qty, expires.UnixMicro()))
		if err != nil {
			return h.t.Err(ctx, "hold", err)
		}
		if n == 0 {
			return h.t.Fail("", fmt.Errorf("%w: line %q of order %q", inventory.ErrDuplicate, sku, id))
		}
		ok, err = h.t.Set(ctx, tx, sku, version, newStock)
		if err == nil && !ok {
			return errStale
		}
		if err != nil || mv == nil {
			return err
		}
		return h.t.WriteMoves(ctx, tx, []sqlengine.Move{*mv})
	})
	if errors.Is(err, errStale) {
		return false, nil
	}
	return err == nil, err
}

// errStale rolls back a write whose compare-and-set lost.
var errStale = errors.New("sqlstore: stale version")

// Unhold deletes the line (sku, id) and, unless sold, gives its qty back
// to sku's stock (capped at MaxStock), in one transaction; it returns the
// qty, or 0 when there is no such line. With mv not nil it records mv in
// the movement ledger, its units the line's qty and its Available the
// stock after: a sold line then writes the stock row too (moving its
// version on), so that the row is locked while the entry is written, as
// every entry of the SKU is.
func (h *holds) Unhold(ctx context.Context, caller *sqlx.Tx, sku, id string, sold bool, mv *sqlengine.Move) (qty int64, err error) {
	err = h.t.Atomic(ctx, caller, "unhold", func(tx *sqlx.Tx) error {
		qty = 0
		err := tx.QueryRowxContext(ctx, h.q.lockLine, id, sku).Scan(&qty)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return h.t.Err(ctx, "unhold", err)
		}
		if _, err := tx.ExecContext(ctx, h.q.dropLine, id, sku); err != nil {
			return h.t.Err(ctx, "unhold", err)
		}
		if !sold || mv != nil {
			give := qty
			if sold {
				give = 0
			}
			if _, err := tx.ExecContext(ctx, h.q.give, give, inventory.MaxStock, sku); err != nil {
				return h.t.Err(ctx, "unhold", err)
			}
		}
		if mv == nil {
			return nil
		}
		return h.move(ctx, tx, sku, qty, *mv)
	})
	if err != nil {
		return 0, err
	}
	return qty, nil
}

// move writes mv, the entry of a line of qty units of sku, through tx,
// with the stock after it read back (the stock row is tx's: it wrote it);
// a SKU gone meanwhile records nothing.
func (h *holds) move(ctx context.Context, tx *sqlx.Tx, sku string, qty int64, mv sqlengine.Move) error {
	after, err := h.t.GetOn(ctx, tx, sku)
	if errors.Is(err, inventory.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	mv.Units, mv.Available = qty, after
	return h.t.WriteMoves(ctx, tx, []sqlengine.Move{mv})
}

// orderRow is an order record as the orders table has it; times are Unix
// µs on the database's clock.
type orderRow struct {
	Lines            []byte // JSON
	State            string
	Expires, Abandon int64
	Complete, Done   bool
	Kept             sql.NullInt64 // until when a done record is kept
	Now              int64         // the database's clock at the read
}

// CreateOrder forgets a done record of id kept past its time, then
// inserts the record, held, expiring ttl from the database's clock now
// and, while incomplete, abandoned (abandon_at, due_at) grace from now,
// and returns it. ok=false: a record of id exists.
func (h *holds) CreateOrder(ctx context.Context, caller *sqlx.Tx, id string, lines []byte, ttl, grace time.Duration) (o orderRow, ok bool, err error) {
	create := func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, h.q.forgetOrder, id); err != nil {
			return h.t.Err(ctx, "create order", err)
		}
		abandon := grace.Microseconds()
		n, err := sqlengine.Rows(tx.ExecContext(ctx, h.q.createOrder, id, lines, ttl.Microseconds(), abandon, abandon))
		if err != nil {
			return h.t.Err(ctx, "create order", err)
		}
		if ok = n == 1; ok {
			o, _, err = h.ReadOrder(ctx, tx, id, false)
		}
		return err
	}
	if caller == nil && h.t.Engine == sqldialect.MySQL {
		// At InnoDB's REPEATABLE READ the DELETE of an absent id locks
		// the gap, and concurrent creates inserting into one gap
		// deadlock; READ COMMITTED takes no gap locks.
		err = h.t.TxWith(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, create)
	} else {
		err = h.t.Atomic(ctx, caller, "create order", create)
	}
	return o, ok, err
}

// ReadOrder reads the record of id through q, with lock FOR UPDATE (on
// SQLite, the transaction's write lock does it).
func (h *holds) ReadOrder(ctx context.Context, q sqlx.QueryerContext, id string, lock bool) (o orderRow, found bool, err error) {
	stmt := h.q.order
	if lock {
		stmt = h.q.lockOrder
	}
	var complete, done int64
	err = q.QueryRowxContext(ctx, stmt, id).Scan(&o.Lines, &o.State, &o.Expires, &o.Abandon, &complete, &done, &o.Kept, &o.Now)
	if errors.Is(err, sql.ErrNoRows) {
		return orderRow{}, false, nil
	}
	if err != nil {
		return orderRow{}, false, h.t.Err(ctx, "read order", err)
	}
	o.Complete, o.Done = complete != 0, done != 0
	return o, true, nil
}

// SetOrder writes the record of id: state, flags, due time and kept time.
func (h *holds) SetOrder(ctx context.Context, e sqlx.ExecerContext, id string, o orderRow, due int64) error {
	if _, err := e.ExecContext(ctx, h.q.setOrder, o.State, b2i(o.Complete), b2i(o.Done), due, o.Kept, id); err != nil {
		return h.t.Err(ctx, "update order", err)
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
func (h *holds) DropOrder(ctx context.Context, e sqlx.ExecerContext, id string) error {
	if _, err := e.ExecContext(ctx, h.q.dropOrder, id); err != nil {
		return h.t.Err(ctx, "delete order", err)
	}
	return nil
}

// DueOrders returns the ids of up to max records not done and due,
// earliest first.
func (h *holds) DueOrders(ctx context.Context, q sqlx.QueryerContext, max int) ([]string, error) {
	var ids []string
	if err := sqlx.SelectContext(ctx, q, &ids, h.q.dueOrders, max); err != nil {
		return nil, h.t.Err(ctx, "read due orders", err)
	}
	return ids, nil
}

// PruneOrders deletes up to 1000 done records kept past their time.
func (h *holds) PruneOrders(ctx context.Context) (int64, error) {
	n, err := sqlengine.Rows(h.t.DB.ExecContext(ctx, h.q.pruneOrders))
	if err != nil {
		return 0, h.t.Err(ctx, "prune orders", err)
	}
	return n, nil
}
