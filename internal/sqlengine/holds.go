package sqlengine

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
)

// The holds table keeps one row per line of a hold: (hold_id, sku, qty,
// state, expires_at, ended_at), primary key (hold_id, sku). Times are Unix
// microseconds on the database's clock (each engine's file says which
// expression); ended_at is NULL while the line is held. A line is in one of
// four states, and leaves "held" once:
const (
	Held      = "held"      // its units are out of the available stock
	Confirmed = "confirmed" // sold
	Cancelled = "cancelled" // given back by Cancel before its TTL passed
	Expired   = "expired"   // given back after its TTL passed
)

// Row is a stock row as the holds-aware reads see it.
type Row struct {
	Stock, Version int64
	// Expired: some line of the SKU is held past its TTL, not yet released.
	Expired bool
}

// ReadHolds reads the rows of skus in one statement through q. A SKU
// without a row is absent from the map.
func (t *Tables) ReadHolds(ctx context.Context, q sqlx.QueryerContext, skus []string) (map[string]Row, error) {
	stmt := t.q.ReadHolds1
	if len(skus) != 1 {
		stmt = t.q.Expand(t.q.ReadHolds, len(skus))
	}
	args := make([]any, len(skus))
	for i, s := range skus {
		args[i] = s
	}
	rows, err := q.QueryxContext(ctx, stmt, args...)
	if err != nil {
		return nil, t.Err(ctx, "read", err)
	}
	defer rows.Close()
	out := make(map[string]Row, len(skus))
	for rows.Next() {
		var sku string
		var r Row
		if err := rows.Scan(&sku, &r.Stock, &r.Version, &r.Expired); err != nil {
			return nil, t.Err(ctx, "read", err)
		}
		out[sku] = r
	}
	if err := rows.Err(); err != nil {
		return nil, t.Err(ctx, "read", err)
	}
	return out, nil
}

// Ref is one held line of a SKU, by hold id.
type Ref struct {
	ID  string
	Qty int64
}

// Expired returns up to [sqldialect.MaxRelease] lines of sku held past
// their TTL, oldest first, and their units.
func (t *Tables) Expired(ctx context.Context, q sqlx.QueryerContext, sku string) (refs []Ref, units int64, err error) {
	rows, err := q.QueryxContext(ctx, t.q.Expired, sku)
	if err != nil {
		return nil, 0, t.Err(ctx, "read expired holds", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Ref
		if err := rows.Scan(&r.ID, &r.Qty); err != nil {
			return nil, 0, t.Err(ctx, "read expired holds", err)
		}
		refs, units = append(refs, r), units+r.Qty
	}
	if err := rows.Err(); err != nil {
		return nil, 0, t.Err(ctx, "read expired holds", err)
	}
	return refs, units, nil
}

// Reserve inserts the lines of hold id, held for ttl from the database's
// clock now, through e. ok=false: a line of id already exists (a
// concurrent Reserve won); the caller rolls back.
func (t *Tables) Reserve(ctx context.Context, e sqlx.ExecerContext, id string, lines []inventory.Line, ttl time.Duration) (ok bool, err error) {
	args := make([]any, 0, 4*len(lines))
	for _, l := range lines {
		args = append(args, id, l.SKU, l.Qty, ttl.Microseconds())
	}
	n, err := rows(e.ExecContext(ctx, t.q.Expand(t.q.Reserve, len(lines)), args...))
	if err != nil {
		return false, t.Err(ctx, "insert hold", err)
	}
	return n == int64(len(lines)), nil
}

// Line is one line of a hold as the holds table has it.
type Line struct {
	inventory.Line
	State   string
	Expires int64         // Unix µs
	Ended   sql.NullInt64 // Unix µs; NULL while held
}

// Lines returns the lines of hold id, by SKU, and the database's clock
// (Unix µs), through q; with lock, they are read with FOR UPDATE (on
// SQLite the transaction's write lock does it).
func (t *Tables) Lines(ctx context.Context, q sqlx.QueryerContext, id string, lock bool) (ls []Line, now int64, err error) {
	stmt := t.q.Lines
	if lock {
		stmt = t.q.LockLines
	}
	rows, err := q.QueryxContext(ctx, stmt, id)
	if err != nil {
		return nil, 0, t.Err(ctx, "read hold", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l Line
		if err := rows.Scan(&l.SKU, &l.Qty, &l.State, &l.Expires, &l.Ended, &now); err != nil {
			return nil, 0, t.Err(ctx, "read hold", err)
		}
		ls = append(ls, l)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, t.Err(ctx, "read hold", err)
	}
	return ls, now, nil
}

// ConfirmHold marks every held, unexpired line of hold id confirmed and
// returns how many it marked.
func (t *Tables) ConfirmHold(ctx context.Context, e sqlx.ExecerContext, id string) (int64, error) {
	return t.count(ctx, e, "confirm hold", t.q.Confirm, id)
}

// EndHold moves every held line of hold id to state (Cancelled or Expired)
// and returns how many it moved; the caller gives their units back.
func (t *Tables) EndHold(ctx context.Context, e sqlx.ExecerContext, id, state string) (int64, error) {
	return t.count(ctx, e, "end hold", t.q.End, state, id)
}

// ForgetHold deletes the lines of hold id that ended more than the key TTL
// ago and returns how many it deleted.
func (t *Tables) ForgetHold(ctx context.Context, e sqlx.ExecerContext, id string) (int64, error) {
	return t.count(ctx, e, "forget hold", t.q.Forget, id, t.cfg.KeyTTL.Microseconds())
}

// KeyTTL is how long an ended hold's id stays taken.
func (t *Tables) KeyTTL() time.Duration { return t.cfg.KeyTTL }

// Held returns the units of sku in held lines, expired ones included.
func (t *Tables) Held(ctx context.Context, q sqlx.QueryerContext, sku string) (int64, error) {
	return t.scalar(ctx, q, "held", t.q.Held, sku)
}

// Due returns the ids of up to limit holds with a line held past its TTL.
func (t *Tables) Due(ctx context.Context, q sqlx.QueryerContext, limit int) ([]string, error) {
	var ids []string
	if err := sqlx.SelectContext(ctx, q, &ids, t.q.Due, limit); err != nil {
		return nil, t.Err(ctx, "read due holds", err)
	}
	return ids, nil
}

// PruneHolds deletes up to 1000 lines that ended more than the key TTL ago
// and reports how many.
func (t *Tables) PruneHolds(ctx context.Context) (int64, error) {
	return t.count(ctx, t.DB, "prune holds", t.q.PruneHolds, t.cfg.KeyTTL.Microseconds())
}

// Pkg is the error prefix of t: the public package's name.
func (t *Tables) Pkg() string { return t.cfg.Pkg }
