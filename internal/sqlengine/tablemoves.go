package sqlengine

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect"
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
		stmt := t.q.Expand(t.mv.Insert, len(part))
		if t.Engine == sqldialect.MySQL { // one round trip, not the driver's prepare and execute
			var err error
			if stmt, err = mysqlLiterals(stmt, args); err != nil {
				return t.Fail("write ledger", err)
			}
			args = nil
		}
		if _, err := e.ExecContext(ctx, stmt, args...); err != nil {
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

// oneRoundTrip reports whether [Tables.MoveLogged] writes a move and its
// entries in one round trip: the Tables keep a movement ledger on
// PostgreSQL (one statement) or MariaDB (one compound statement; not on
// MySQL, which has none: there MoveLogged finds out at its first call and
// runs a transaction from then on).
func (t *Tables) oneRoundTrip() bool {
	return t.mv != nil && t.mv.MoveLogged != "" && !t.noCompound.Load()
}

// MoveLogged is [Tables.Move] through the pool with the movement ledger's
// entries ms of the move, each Available being the entry's offset from
// the stock before the move, written in the same transaction: in one
// round trip on PostgreSQL and MariaDB, otherwise in a transaction (BEGIN,
// the UPDATE, the INSERT, COMMIT). ok=false means no row matched and
// nothing was written.
func (t *Tables) MoveLogged(ctx context.Context, sku string, delta, lo, hi int64, ms []Move) (after int64, ok bool, err error) {
	if !t.oneRoundTrip() {
		return t.moveLoggedTx(ctx, sku, delta, lo, hi, ms)
	}
	var a sql.NullInt64
	if t.Engine == sqldialect.Postgres {
		kinds, keys, refs := make([]string, len(ms)), make([]string, len(ms)), make([]string, len(ms))
		units, offs := make([]int64, len(ms)), make([]int64, len(ms))
		for i, m := range ms {
			kinds[i], units[i], offs[i], keys[i], refs[i] = string(m.Kind), m.Units, m.Available-delta, m.Key, m.Ref
		}
		err = t.DB.QueryRowxContext(ctx, t.mv.MoveLogged, delta, sku, lo, hi, kinds, units, offs, keys, refs).Scan(&a)
	} else {
		args := make([]any, 0, 4+6*len(ms))
		args = append(args, delta, sku, lo, hi)
		for _, m := range ms {
			args = append(args, m.SKU, string(m.Kind), m.Units, m.Available-delta, m.Key, m.Ref)
		}
		var stmt string
		if stmt, err = mysqlLiterals(t.q.Expand(t.mv.MoveLogged, len(ms)), args); err != nil {
			return 0, false, t.Fail("update", err)
		}
		err = t.DB.QueryRowxContext(ctx, stmt).Scan(&a)
		if err != nil && sqldialect.NoCompound(err) {
			t.noCompound.Store(true)
			return t.moveLoggedTx(ctx, sku, delta, lo, hi, ms)
		}
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, t.Err(ctx, "update", err)
	}
	return a.Int64, a.Valid, nil
}

// moveLoggedTx is [Tables.MoveLogged] in a transaction: BEGIN, the
// UPDATE, the INSERT, COMMIT.
func (t *Tables) moveLoggedTx(ctx context.Context, sku string, delta, lo, hi int64, ms []Move) (after int64, ok bool, err error) {
	tx, err := t.Begin(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	after, ok, err = t.Move(ctx, tx, sku, delta, lo, hi)
	if err == nil && ok {
		abs := make([]Move, len(ms))
		for i, m := range ms {
			m.Available += after - delta
			abs[i] = m
		}
		err = t.WriteMoves(ctx, tx, abs)
	}
	if err = t.End(ctx, tx, err); err != nil {
		return 0, false, err
	}
	return after, ok, nil
}

// mysqlLiterals returns q with its ? placeholders replaced by args written
// as MySQL literals, so that the driver sends it in one round trip, as
// text, where it would otherwise prepare it, execute it and close it
// (unless the DSN sets interpolateParams): integers in decimal, strings
// in hexadecimal (X'...', a binary string, as every column of the
// library's tables is), which no content can break out of. Every
// statement it is given is the library's own, with no ? but its
// placeholders, and args of those two types only: an error is a bug.
func mysqlLiterals(q string, args []any) (string, error) {
	var b strings.Builder
	b.Grow(len(q) + 24*len(args))
	for _, a := range args {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			return "", fmt.Errorf("fewer placeholders than the %d arguments", len(args))
		}
		b.WriteString(q[:i])
		q = q[i+1:]
		switch v := a.(type) {
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case string:
			b.WriteString("X'")
			b.WriteString(hex.EncodeToString([]byte(v)))
			b.WriteByte('\'')
		default:
			return "", fmt.Errorf("an argument of type %T", a)
		}
	}
	if strings.IndexByte(q, '?') >= 0 {
		return "", fmt.Errorf("more placeholders than the %d arguments", len(args))
	}
	b.WriteString(q)
	return b.String(), nil
}
