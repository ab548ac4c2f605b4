package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
)

// The movement ledger (package ledger; Config.Moves) is a table of the
// library's own, named after the stock table: its name (its first 57
// bytes) and MovesSuffix, "stock_moves" for the default table. It is not
// the idempotency ledger (Schema.Ledger, "stock_ledger"), which keeps keys
// for a while; this one keeps every move, for good:
//
//	pos        the entry's position: an auto-increment key. The rows of a
//	           SKU are written by transactions that hold its stock row, so
//	           their positions grow in the order the moves took effect.
//	sku, kind, units, available (the stock after), idem_key, caller_ref,
//	hold_id    "" for none
//	moved_at   Unix microseconds on the database's clock ({{.Now}})
//
// with an index on (sku, pos). Held and Sold are not stored: the reader
// counts them from the kinds (see [Tables.ReadMoves]).

// MovesSuffix names the movement ledger's table after the stock table.
const MovesSuffix = "_moves"

// maxMoveRows bounds the rows of one INSERT of entries (8 parameters
// each, well within every engine's limit); a batch has at most 128 calls
// and their expired holds, so it is nearly always one INSERT.
const maxMoveRows = 1000

// The insert and page statements of the movement ledger, the same text
// on every engine.
const (
	movesInsert = `INSERT INTO {{.Moves}} (sku, kind, units, available, idem_key, caller_ref, hold_id, moved_at)
		VALUES {{rows (printf "(?, ?, ?, ?, ?, ?, ?, %s)" .Now)}}`
	movesPage = `SELECT pos, kind, units, available, idem_key, caller_ref, hold_id, moved_at FROM {{.Moves}}
		WHERE sku = ? AND pos > ? ORDER BY pos LIMIT ?`
)

// movesSQL is one engine's statements of the movement ledger, as
// text/template text over [moveNames] (insert and page: movesInsert and
// movesPage).
type movesSQL struct {
	create         []string
	insert         string // one {{rows}} list
	page, counters string
	// moveLogged, where the engine can (PostgreSQL), is move with the
	// INSERT of its entries in the same statement; one {{rows}} list.
	moveLogged string
}

// moveNames is what the movement ledger's templates use.
type moveNames struct {
	names
	Moves, MovesBySKU string
}

// movesText is each engine's text. The counters statement sums the Held
// and Sold moves of a SKU's entries up to a position, for a page that
// starts past the first entry.
var movesText = map[Engine]movesSQL{
	MySQL: {
		create: []string{`CREATE TABLE IF NOT EXISTS {{.Moves}} (
			pos BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			sku VARBINARY(255) NOT NULL,
			kind VARBINARY(7) NOT NULL,
			units BIGINT NOT NULL,
			available BIGINT NOT NULL,
			idem_key VARBINARY(255) NOT NULL,
			caller_ref VARBINARY(255) NOT NULL,
			hold_id VARBINARY(257) NOT NULL,
			moved_at BIGINT NOT NULL,
			KEY {{.MovesBySKU}} (sku, pos)
		) ENGINE=InnoDB`},
		counters: `SELECT
				CAST(COALESCE(SUM(CASE WHEN kind = 'reserve' THEN units
					WHEN kind IN ('confirm', 'cancel', 'expire') THEN -units ELSE 0 END), 0) AS SIGNED),
				CAST(COALESCE(SUM(CASE WHEN kind IN ('reduce', 'confirm') THEN units
					WHEN kind = 'return' THEN -units ELSE 0 END), 0) AS SIGNED)
			FROM {{.Moves}} WHERE sku = ? AND pos <= ?`,
	},
	Postgres: {
		create: []string{`CREATE TABLE IF NOT EXISTS {{.Moves}} (
			pos BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			sku TEXT COLLATE "C" NOT NULL,
			kind TEXT COLLATE "C" NOT NULL,
			units BIGINT NOT NULL,
			available BIGINT NOT NULL,
			idem_key TEXT COLLATE "C" NOT NULL,
			caller_ref TEXT COLLATE "C" NOT NULL,
			hold_id TEXT COLLATE "C" NOT NULL,
			moved_at BIGINT NOT NULL
		)`,
			`CREATE INDEX IF NOT EXISTS {{.MovesBySKU}} ON {{.Moves}} (sku, pos)`},
		// move and the INSERT of its entries, one statement and so one
		// transaction with no BEGIN or COMMIT round trip: the INSERT reads
		// the UPDATE's row, so it inserts nothing when that matched none.
		// Each entry's available is the new stock less the change plus its
		// offset; ord keeps the entries' positions in the calls' order.
		moveLogged: `WITH u AS (
				UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?::BIGINT, {{.Version}} = {{.Version}} + 1
				WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
					AND NOT EXISTS (SELECT 1 FROM {{.Holds}} h
						WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
				RETURNING {{.Stock}} AS after),
			i AS (
				INSERT INTO {{.Moves}} (sku, kind, units, available, idem_key, caller_ref, hold_id, moved_at)
				SELECT v.sku, v.kind, v.units, u.after - ?::BIGINT + v.off, v.k, v.r, '', {{.Now}}
				FROM u CROSS JOIN (VALUES {{rows "(?::INT, ?::TEXT, ?::TEXT, ?::BIGINT, ?::BIGINT, ?::TEXT, ?::TEXT)"}})
					AS v(ord, sku, kind, units, off, k, r)
				ORDER BY v.ord)
			SELECT after FROM u`,
		counters: `SELECT
				COALESCE(SUM(CASE WHEN kind = 'reserve' THEN units
					WHEN kind IN ('confirm', 'cancel', 'expire') THEN -units ELSE 0 END), 0)::BIGINT,
				COALESCE(SUM(CASE WHEN kind IN ('reduce', 'confirm') THEN units
					WHEN kind = 'return' THEN -units ELSE 0 END), 0)::BIGINT
			FROM {{.Moves}} WHERE sku = ? AND pos <= ?`,
	},
	SQLite: {
		// AUTOINCREMENT: a position is never used twice, even after the
		// last row is deleted.
		create: []string{`CREATE TABLE IF NOT EXISTS {{.Moves}} (
			pos INTEGER PRIMARY KEY AUTOINCREMENT,
			sku TEXT NOT NULL,
			kind TEXT NOT NULL,
			units INTEGER NOT NULL,
			available INTEGER NOT NULL,
			idem_key TEXT NOT NULL,
			caller_ref TEXT NOT NULL,
			hold_id TEXT NOT NULL,
			moved_at INTEGER NOT NULL
		)`,
			`CREATE INDEX IF NOT EXISTS {{.MovesBySKU}} ON {{.Moves}} (sku, pos)`},
		counters: `SELECT
				COALESCE(SUM(CASE WHEN kind = 'reserve' THEN units
					WHEN kind IN ('confirm', 'cancel', 'expire') THEN -units ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN kind IN ('reduce', 'confirm') THEN units
					WHEN kind = 'return' THEN -units ELSE 0 END), 0)
			FROM {{.Moves}} WHERE sku = ? AND pos <= ?`,
	},
}

// movesTable is the movement ledger's table name for schema s.
func movesTable(s Schema) string {
	return s.Table[:min(len(s.Table), 63-len(MovesSuffix))] + MovesSuffix
}

// MovesTable returns the name of the movement ledger's table for schema s
// (defaulted): the stock table's name followed by [MovesSuffix].
func MovesTable(s Schema) string { return movesTable(s.WithDefaults()) }

// buildMoves renders eng's movement ledger statements over n for schema s.
func buildMoves(eng Engine, s Schema, n names) *movesSQL {
	text := movesText[eng]
	q := func(id string) string { return mysqlOr(eng, "`", `"`) + id + mysqlOr(eng, "`", `"`) }
	moves := movesTable(s)
	mn := moveNames{names: n, Moves: q(moves), MovesBySKU: q(moves[:min(len(moves), 56)] + "_by_sku")}
	render := func(src string) string { return mn.render(src) }
	out := &movesSQL{insert: render(movesInsert), page: bind(eng, render(movesPage)), counters: bind(eng, render(text.counters))}
	for _, c := range text.create {
		out.create = append(out.create, render(c))
	}
	if text.moveLogged != "" {
		out.moveLogged = render(text.moveLogged)
	}
	return out
}

func mysqlOr(eng Engine, mysql, other string) string {
	if eng == MySQL {
		return mysql
	}
	return other
}

// render executes src over mn (see names.render).
func (mn moveNames) render(src string) string { return renderOver(src, mn) }

// checkMoves refuses a schema whose movement ledger's table would be one
// of its other tables.
func checkMoves(s Schema) error {
	m := movesTable(s)
	if m == s.Ledger || m == s.Holds || m == s.Orders {
		return fmt.Errorf("%w: the movement ledger's table %q is the name of another table of the schema", inventory.ErrInvalidArgument, m)
	}
	return nil
}

// Move is one entry of the movement ledger, as a transaction writes it
// with [Tables.WriteMoves]: the stock after it is Available.
type Move struct {
	SKU            string
	Kind           ledger.Kind
	Units          int64
	Available      int64
	Key, Ref, Hold string
}

// Ledgered reports whether t keeps a movement ledger (Config.Moves).
func (t *Tables) Ledgered() bool { return t.mv != nil }

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
		if _, err := e.ExecContext(ctx, expand(t.Engine, t.mv.insert, len(part)), args...); err != nil {
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
		if err := q.QueryRowxContext(ctx, t.mv.counters, sku, after).Scan(&cur.Held, &cur.Sold); err != nil {
			return nil, t.Err(ctx, "read ledger", err)
		}
	}
	rows, err := q.QueryxContext(ctx, t.mv.page, sku, after, limit)
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
func (t *Tables) OneStatementMoves() bool { return t.mv != nil && t.mv.moveLogged != "" }

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
	err = q.QueryRowxContext(ctx, expand(t.Engine, t.mv.moveLogged, len(ms)), args...).Scan(&after)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.Err(ctx, "update", err)
	}
	return after, true, nil
}
