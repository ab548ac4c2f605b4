package sqlengine

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/ledger"
)

// The movement ledger's table and statements are package sqldialect's
// (its moves.go); these are the calls of [Tables] that run them.

// maxMoveRows bounds the rows of one INSERT of entries (8 parameters
// each, well within every engine's limit); a batch has at most 128 calls
// and their expired holds, so it is nearly always one INSERT.
const maxMoveRows = 1000

// Move is one entry of the movement ledger, as a transaction writes it
// with [Tables.WriteMoves]: the stock after it is Available.
type Move struct {
	SKU            string
	Kind           ledger.Kind
	Units          int64
	Available      int64
	Key, Ref, Hold string
}

// WriteMoves writes ms through e, the transaction of the moves, in one
// INSERT (one per 1000 entries). Without a movement ledger, or with no
// entries, it does nothing.
func (t *Tables) WriteMoves(ctx context.Context, e sqlx.ExecerContext, ms []Move) error {
	if t.mv == nil {
		return nil
	}
	for len(ms) > 0 {
		part := ms[:min(len(ms), maxMoveRows)]
		ms = ms[len(part):]
		args := make([]any, 0, 7*len(part))
		for _, m := range part {
			args = append(args, m.SKU, string(m.Kind), m.Units, m.Available, m.Key, m.Ref, m.Hold)
		}
		if _, err := e.ExecContext(ctx, t.q.Expand(t.mv.Insert, len(part)), args...); err != nil {
			return t.Err(ctx, "write ledger", err)
		}
	}
	return nil
}

// ReadMoves returns up to limit entries of sku after position after, in
// order, through q, with their Held and Sold counted from the SKU's first
// entry. The error wraps [ledger.ErrNotKept] when t keeps no ledger.
func (t *Tables) ReadMoves(ctx context.Context, q sqlx.QueryerContext, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if t.mv == nil {
		return nil, t.Fail("entries", ledger.ErrNotKept)
	}
	var cur ledger.Stock
	if after > 0 {
		if err := q.QueryRowxContext(ctx, t.mv.Counters, sku, after).Scan(&cur.Held, &cur.Sold); err != nil {
			return nil, t.Err(ctx, "read ledger", err)
		}
	}
	rows, err := q.QueryxContext(ctx, t.mv.Page, sku, after, limit)
	if err != nil {
		return nil, t.Err(ctx, "read ledger", err)
	}
	defer rows.Close()
	var out []ledger.Entry
	for rows.Next() {
		e := ledger.Entry{SKU: sku}
		var kind string
		var at int64
		if err := rows.Scan(&e.Pos, &kind, &e.Units, &e.After.Available, &e.Key, &e.Ref, &e.Hold, &at); err != nil {
			return nil, t.Err(ctx, "read ledger", err)
		}
		e.Kind, e.Time = ledger.Kind(kind), time.UnixMicro(at)
		next, err := cur.Apply(e.Kind, e.Units)
		if err != nil {
			return nil, t.Fail("read ledger", err)
		}
		cur.Held, cur.Sold = next.Held, next.Sold
		e.After.Held, e.After.Sold = cur.Held, cur.Sold
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, t.Err(ctx, "read ledger", err)
	}
	return out, nil
}

// OneStatementMoves reports whether [Tables.MoveLogged] can run: the
// Tables keep a movement ledger on an engine that writes a move and its
// entries in one statement (PostgreSQL).
func (t *Tables) OneStatementMoves() bool { return t.mv != nil && t.mv.MoveLogged != "" }

// MoveLogged is [Tables.Move] through q with the movement ledger's
// entries ms in the same statement (see [Tables.OneStatementMoves]), each
// Available being the entry's offset from the stock before the move.
// ok=false means no row matched and nothing was written.
func (t *Tables) MoveLogged(ctx context.Context, q sqlx.QueryerContext, sku string, delta, lo, hi int64, ms []Move) (after int64, ok bool, err error) {
	args := make([]any, 0, 5+7*len(ms))
	args = append(args, delta, sku, lo, hi, delta)
	for i, m := range ms {
		args = append(args, i, m.SKU, string(m.Kind), m.Units, m.Available, m.Key, m.Ref)
	}
	err = q.QueryRowxContext(ctx, t.q.Expand(t.mv.MoveLogged, len(ms)), args...).Scan(&after)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.Err(ctx, "update", err)
	}
	return after, true, nil
}
