package sqldialect

import (
	"fmt"

	"github.com/stockkit/inventory"
)

// The movement ledger (package ledger; Config.Moves) is a table of the
// library's own, named after the stock table: its name (its first 57
// bytes) and MovesSuffix, "stock_moves" for the default table. It is not
// the idempotency ledger (Schema.Ledger, "stock_ledger"), which keeps keys
// for a while; this one keeps every move, for good:
//
//	pos        the row's key: an auto-increment. The rows of a SKU are
//	           written by transactions that hold its stock row, so their
//	           keys grow in the order the moves took effect.
//	n          the entries of the row: 1, or a run of n entries of one kind
//	           (reduce or return) and units with no key, reference or hold,
//	           each following the one before; entry i (from 0) of the row
//	           has position pos*1024 + i (sqlengine's Tables.ReadMoves)
//	sku, kind, units, available (the stock after the row's last entry),
//	idem_key, caller_ref,
//	hold_id    "" for none
//	moved_at   Unix microseconds on the database's clock ({{.Now}})
//
// with an index on (sku, pos). Held and Sold are not stored: the reader
// counts them from the kinds (see sqlengine's Tables.ReadMoves).

// MovesSuffix names the movement ledger's table after the stock table.
const MovesSuffix = "_moves"

// The insert and page statements of the movement ledger, the same text
// on every engine.
const (
	movesInsert = `INSERT INTO {{.Moves}} (sku, kind, units, n, available, idem_key, caller_ref, hold_id, moved_at)
		VALUES {{rows (printf "(?, ?, ?, ?, ?, ?, ?, ?, %s)" .Now)}}`
	movesPage = `SELECT pos, kind, units, n, available, idem_key, caller_ref, hold_id, moved_at FROM {{.Moves}}
		WHERE sku = ? AND pos >= ? ORDER BY pos LIMIT ?`
)

// MovesSQL is one engine's statements of the movement ledger, as
// text/template text over [moveNames] (insert and page: movesInsert and
// movesPage).
type MovesSQL struct {
	Create         []string
	Insert         string // one {{rows}} list
	Page, Counters string
	// MoveLogged, where the engine can, is Move with the INSERT of its
	// entries in one round trip: on PostgreSQL one statement, its entries
	// as arrays; on MariaDB a compound statement with one {{rows}} list.
	MoveLogged string
}

// moveNames is what the movement ledger's templates use.
type moveNames struct {
	names
	Moves, MovesBySKU string
}

// movesText is each engine's text. The counters statement sums the Held
// and Sold moves of a SKU's entries in the rows before a row, for a page
// that starts past the first entry.
var movesText = map[Engine]MovesSQL{
	MySQL: {
		Create: []string{`CREATE TABLE IF NOT EXISTS {{.Moves}} (
			pos BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			sku VARBINARY(255) NOT NULL,
			kind VARBINARY(7) NOT NULL,
			units BIGINT NOT NULL,
			n BIGINT NOT NULL,
			available BIGINT NOT NULL,
			idem_key VARBINARY(255) NOT NULL,
			caller_ref VARBINARY(255) NOT NULL,
			hold_id VARBINARY(257) NOT NULL,
			moved_at BIGINT NOT NULL,
			KEY {{.MovesBySKU}} (sku, pos)
		) ENGINE=InnoDB`},
		// move and the INSERT of its entries in one round trip: a compound
		// statement (MariaDB's BEGIN NOT ATOMIC; MySQL has none, and fails
		// it with a syntax error) that runs them in a transaction of its own,
		// rolled back on any error, which it then raises again. It answers
		// the new stock, NULL when the UPDATE matched no row (nothing
		// written). Each entry's available is the new stock plus its offset
		// from it, and its time the clock read once. Its arguments are
		// written into the text (see sqlengine's Tables.MoveLogged): a
		// compound statement takes no parameters.
		MoveLogged: `BEGIN NOT ATOMIC
				DECLARE a, t BIGINT;
				DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
				START TRANSACTION;
				UPDATE {{.Table}} SET {{.Stock}} = LAST_INSERT_ID({{.Stock}} + ?), {{.Version}} = {{.Version}} + 1
				WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
					AND NOT EXISTS (SELECT 1 FROM {{.Holds}} h
						WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}});
				IF ROW_COUNT() = 1 THEN
					SET a = LAST_INSERT_ID(), t = {{.Now}};
					INSERT INTO {{.Moves}} (sku, kind, units, n, available, idem_key, caller_ref, hold_id, moved_at)
					VALUES {{rows "(?, ?, ?, ?, a + ?, ?, ?, '', t)"}};
				END IF;
				COMMIT;
				SELECT a;
			END`,
		Counters: `SELECT
				CAST(COALESCE(SUM(CASE WHEN kind = 'reserve' THEN units * n
					WHEN kind IN ('confirm', 'cancel', 'expire') THEN -units * n ELSE 0 END), 0) AS SIGNED),
				CAST(COALESCE(SUM(CASE WHEN kind IN ('reduce', 'confirm') THEN units * n
					WHEN kind = 'return' THEN -units * n ELSE 0 END), 0) AS SIGNED)
			FROM {{.Moves}} WHERE sku = ? AND pos < ?`,
	},
	Postgres: {
		Create: []string{`CREATE TABLE IF NOT EXISTS {{.Moves}} (
			pos BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			sku TEXT COLLATE "C" NOT NULL,
			kind TEXT COLLATE "C" NOT NULL,
			units BIGINT NOT NULL,
			n BIGINT NOT NULL,
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
		// The entries come as arrays (kinds, units, offsets, keys,
		// references), so that the text is the same whatever their number
		// and pgx prepares it once per connection. Each entry's available
		// is the new stock plus its offset from it; ord keeps the entries'
		// positions in the calls' order.
		MoveLogged: `WITH u AS (
				UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?::BIGINT, {{.Version}} = {{.Version}} + 1
				WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
					AND NOT EXISTS (SELECT 1 FROM {{.Holds}} h
						WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
				RETURNING {{.SKU}} AS sku, {{.Stock}} AS after),
			i AS (
				INSERT INTO {{.Moves}} (sku, kind, units, n, available, idem_key, caller_ref, hold_id, moved_at)
				SELECT u.sku, v.kind, v.units, v.n, u.after + v.off, v.k, v.r, '', {{.Now}}
				FROM u CROSS JOIN unnest(?::TEXT[], ?::BIGINT[], ?::BIGINT[], ?::BIGINT[], ?::TEXT[], ?::TEXT[])
					WITH ORDINALITY AS v(kind, units, n, off, k, r, ord)
				ORDER BY v.ord)
			SELECT after FROM u`,
		Counters: `SELECT
				COALESCE(SUM(CASE WHEN kind = 'reserve' THEN units * n
					WHEN kind IN ('confirm', 'cancel', 'expire') THEN -units * n ELSE 0 END), 0)::BIGINT,
				COALESCE(SUM(CASE WHEN kind IN ('reduce', 'confirm') THEN units * n
					WHEN kind = 'return' THEN -units * n ELSE 0 END), 0)::BIGINT
			FROM {{.Moves}} WHERE sku = ? AND pos < ?`,
	},
	SQLite: {
		// AUTOINCREMENT: a position is never used twice, even after the
		// last row is deleted.
		Create: []string{`CREATE TABLE IF NOT EXISTS {{.Moves}} (
			pos INTEGER PRIMARY KEY AUTOINCREMENT,
			sku TEXT NOT NULL,
			kind TEXT NOT NULL,
			units INTEGER NOT NULL,
			n INTEGER NOT NULL,
			available INTEGER NOT NULL,
			idem_key TEXT NOT NULL,
			caller_ref TEXT NOT NULL,
			hold_id TEXT NOT NULL,
			moved_at INTEGER NOT NULL
		)`,
			`CREATE INDEX IF NOT EXISTS {{.MovesBySKU}} ON {{.Moves}} (sku, pos)`},
		Counters: `SELECT
				COALESCE(SUM(CASE WHEN kind = 'reserve' THEN units * n
					WHEN kind IN ('confirm', 'cancel', 'expire') THEN -units * n ELSE 0 END), 0),
				COALESCE(SUM(CASE WHEN kind IN ('reduce', 'confirm') THEN units * n
					WHEN kind = 'return' THEN -units * n ELSE 0 END), 0)
			FROM {{.Moves}} WHERE sku = ? AND pos < ?`,
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
func buildMoves(eng Engine, s Schema, n names) *MovesSQL {
	text := movesText[eng]
	q := func(id string) string { return mysqlOr(eng, "`", `"`) + id + mysqlOr(eng, "`", `"`) }
	moves := movesTable(s)
	mn := moveNames{names: n, Moves: q(moves), MovesBySKU: q(moves[:min(len(moves), 56)] + "_by_sku")}
	render := func(src string) string { return mn.render(src) }
	out := &MovesSQL{Insert: render(movesInsert), Page: bind(eng, render(movesPage)), Counters: bind(eng, render(text.Counters))}
	for _, c := range text.Create {
		out.Create = append(out.Create, render(c))
	}
	switch {
	case eng == Postgres:
		out.MoveLogged = bind(eng, render(text.MoveLogged))
	case text.MoveLogged != "":
		out.MoveLogged = render(text.MoveLogged) // one {{rows}} list, for Expand
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

// CheckMoves refuses a schema whose movement ledger's table would be one
// of its other tables.
func CheckMoves(s Schema) error {
	m := movesTable(s)
	if m == s.Ledger || m == s.Holds || m == s.Orders {
		return fmt.Errorf("%w: the movement ledger's table %q is the name of another table of the schema", inventory.ErrInvalidArgument, m)
	}
	return nil
}

// mysqlParseError is MySQL's ER_PARSE_ERROR, MySQL's answer to a compound
// statement (MariaDB's BEGIN NOT ATOMIC).
const mysqlParseError = 1064

// NoCompound reports whether err, the error of the compound MoveLogged
// statement on MySQL, means that the server runs no compound statements
// (MySQL, not MariaDB).
func NoCompound(err error) bool {
	n, ok := mysqlNumber(err)
	return ok && n == mysqlParseError
}
