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

// maxMoveRows bounds the rows of one INSERT of entries (9 values each,
// well within every engine's limit); a batch has at most 128 calls and
// their expired holds, so it is nearly always one INSERT.
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
// INSERT (one per 1000 rows), a run of them in one row (see [runs]).
// Without a movement ledger, or with no entries, it does nothing.
func (t *Tables) WriteMoves(ctx context.Context, e sqlx.ExecerContext, ms []Move) error {
	if t.mv == nil {
		return nil
	}
	rs := runs(ms)
	for len(rs) > 0 {
		part := rs[:min(len(rs), maxMoveRows)]
		rs = rs[len(part):]
		args := make([]any, 0, 8*len(part))
		for _, r := range part {
			args = append(args, r.SKU, string(r.Kind), r.Units, r.n, r.Available, r.Key, r.Ref, r.Hold)
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

// rowPositions is how many positions a row of the movement ledger has:
// entry i (from 0) of the row at pos has position pos*rowPositions + i.
const rowPositions = 1024

// moveRow is a row of the movement ledger: n entries, the last one m (see
// [runs]).
type moveRow struct {
	Move
	n int64
}

// runs returns the rows of ms, in order: each run of entries of one SKU,
// one kind, reduce or return, and the same units, with no key, reference
// or hold, each following the one before (its Available that one's less
// or plus the units), in one row of up to rowPositions entries, the
// others one a row. A merged batch of unkeyed calls with no reference is
// one row: an entry a row cost MariaDB and PostgreSQL about 12 µs of CPU
// each (integration/bench BenchmarkLedgerCost, docs/ledger.md).
func runs(ms []Move) []moveRow {
	rs := make([]moveRow, 0, len(ms))
	for _, m := range ms {
		if n := len(rs); n > 0 && extends(rs[n-1], m) {
			rs[n-1].Available, rs[n-1].n = m.Available, rs[n-1].n+1
			continue
		}
		rs = append(rs, moveRow{m, 1})
	}
	return rs
}

// extends reports whether m is the next entry of the run r.
func extends(r moveRow, m Move) bool {
	step := m.Units
	if m.Kind == ledger.Return {
		step = -step
	}
	return r.n < rowPositions && m.Key == "" && m.Ref == "" && m.Hold == "" && r.Key == "" && r.Ref == "" && r.Hold == "" &&
		(m.Kind == ledger.Reduce || m.Kind == ledger.Return) && m.Kind == r.Kind && m.SKU == r.SKU && m.Units == r.Units &&
		m.Available == r.Available-step
}

// ReadMoves returns up to limit entries of sku after position after, in
// order, through q, with their Held and Sold counted from the SKU's first
// entry. The error wraps [ledger.ErrNotKept] when t keeps no ledger.
func (t *Tables) ReadMoves(ctx context.Context, q sqlx.QueryerContext, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if t.mv == nil {
		return nil, t.Fail("entries", ledger.ErrNotKept)
	}
	var cur ledger.Stock
	first := after / rowPositions // the row of position after, whose entries up to it are skipped
	if first > 0 {
		if err := q.QueryRowxContext(ctx, t.mv.Counters, sku, first).Scan(&cur.Held, &cur.Sold); err != nil {
			return nil, t.Err(ctx, "read ledger", err)
		}
	}
	rows, err := q.QueryxContext(ctx, t.mv.Page, sku, first, limit+1) // a row has one entry or more
	if err != nil {
		return nil, t.Err(ctx, "read ledger", err)
	}
	defer rows.Close()
	var out []ledger.Entry
	for rows.Next() && len(out) < limit {
		var r moveRow
		var pos, at int64
		var kind string
		if err := rows.Scan(&pos, &kind, &r.Units, &r.n, &r.Available, &r.Key, &r.Ref, &r.Hold, &at); err != nil {
			return nil, t.Err(ctx, "read ledger", err)
		}
		r.Kind = ledger.Kind(kind)
		if out, err = appendRow(out, &cur, sku, pos, r, time.UnixMicro(at), after, limit); err != nil {
			return nil, t.Fail("read ledger", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, t.Err(ctx, "read ledger", err)
	}
	return out, nil
}

// appendRow appends to out, up to limit, the entries of row r at pos past
// position after, counting Held and Sold on from cur over every entry of
// the row.
func appendRow(out []ledger.Entry, cur *ledger.Stock, sku string, pos int64, r moveRow, at time.Time, after int64, limit int) ([]ledger.Entry, error) {
	step := r.Units // a run's entries: Available back from the last one's
	if r.Kind == ledger.Return {
		step = -step
	}
	if r.n < 1 || r.n > rowPositions || (r.n > 1 && r.Kind != ledger.Reduce && r.Kind != ledger.Return) {
		return out, fmt.Errorf("row %d of %q holds %d %s entries", pos, sku, r.n, r.Kind)
	}
	for i := range r.n {
		next, err := cur.Apply(r.Kind, r.Units)
		if err != nil {
			return out, err
		}
		cur.Held, cur.Sold = next.Held, next.Sold
		e := ledger.Entry{SKU: sku, Pos: pos*rowPositions + i, Kind: r.Kind, Units: r.Units, Key: r.Key, Ref: r.Ref, Hold: r.Hold, Time: at}
		e.After = ledger.Stock{Available: r.Available + (r.n-1-i)*step, Held: cur.Held, Sold: cur.Sold}
		if e.Pos > after && len(out) < limit {
			out = append(out, e)
		}
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
	rs := runs(ms) // their offsets step as their Available would
	if t.Engine == sqldialect.Postgres {
		kinds, keys, refs := make([]string, len(rs)), make([]string, len(rs)), make([]string, len(rs))
		units, ns, offs := make([]int64, len(rs)), make([]int64, len(rs)), make([]int64, len(rs))
		for i, r := range rs {
			kinds[i], units[i], ns[i], offs[i], keys[i], refs[i] = string(r.Kind), r.Units, r.n, r.Available-delta, r.Key, r.Ref
		}
		err = t.DB.QueryRowxContext(ctx, t.mv.MoveLogged, delta, sku, lo, hi, kinds, units, ns, offs, keys, refs).Scan(&a)
	} else {
		args := make([]any, 0, 4+7*len(rs))
		args = append(args, delta, sku, lo, hi)
		for _, r := range rs {
			args = append(args, r.SKU, string(r.Kind), r.Units, r.n, r.Available-delta, r.Key, r.Ref)
		}
		var stmt string
		if stmt, err = mysqlLiterals(t.q.Expand(t.mv.MoveLogged, len(rs)), args); err != nil {
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
