package segment

import (
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect"
)

// Suffix names the segments table: the stock table's name (its first 54
// bytes) and this suffix, "stock_segments" for the default table.
const Suffix = "_segments"

// statements holds the segment rows' SQL for one engine, over one schema.
// Each statement takes its values as bind parameters; the only text put
// into SQL is the table names, validated by sqlengine.New and quoted, and
// the holds' clock, sqldialect's expression.
type statements struct {
	create []string // the segments table
	take   string   // take qty from one segment, if it has them and the SKU no hold past its TTL
	grab   string   // take, autocommit, returning the segment's stock after (MySQL: through LAST_INSERT_ID) or, on PostgreSQL, the SKU's sum
	total  string   // the sum of a SKU's segments and their count
	peek   string   // total, the remaining of an unexpired key and the units of the lines held past their TTL
	lock   []string // lock every segment row of a SKU, then read them in seg order, each with whether the SKU has lines held past their TTL
	clear  string   // delete a SKU's segments from seg on
	upsert string   // rows "(?, ?, ?)" written out per call: set segments' stock
	held   string   // the units of a SKU's held lines, and how many segments it has
}

// build writes eng's statements over the segments table seg and the keys
// table keys, both names plain identifiers, and the holds table holds,
// quoted, whose clock is the expression now (see sqlengine's holds.go).
func build(eng sqldialect.Engine, seg, keys, holds, now string) statements {
	q := `"`
	if eng == sqldialect.MySQL {
		q = "`"
	}
	seg, keys = q+seg+q, q+keys+q
	cast := func(sum string) string {
		switch eng {
		case sqldialect.MySQL:
			return `CAST(` + sum + ` AS SIGNED)`
		case sqldialect.Postgres:
			return sum + `::BIGINT`
		}
		return sum
	}
	sum := cast(`COALESCE(SUM(available), 0)`)
	// expired: the SKU has lines held past their TTL, which the take of
	// one segment must not pass by (the SKU path releases them).
	expired := `EXISTS (SELECT 1 FROM ` + holds + ` h WHERE h.sku = ` + seg + `.sku AND h.state = 'held' AND h.expires_at <= ` + now + `)`
	take := `UPDATE ` + seg + ` SET available = available - ? WHERE sku = ? AND seg = ? AND available >= ? AND NOT ` + expired
	s := statements{
		take:  take,
		total: `SELECT ` + sum + `, COUNT(*) FROM ` + seg + ` WHERE sku = ?`,
		peek: `SELECT ` + sum + `, COUNT(*), (SELECT remaining FROM ` + keys +
			` WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at > ?), (SELECT ` + cast(`COALESCE(SUM(h.qty), 0)`) + ` FROM ` + holds +
			` h WHERE h.sku = ? AND h.state = 'held' AND h.expires_at <= ` + now + `) FROM ` + seg + ` WHERE sku = ?`,
		clear: `DELETE FROM ` + seg + ` WHERE sku = ? AND seg >= ?`,
		held: `SELECT ` + cast(`COALESCE(SUM(qty), 0)`) + `, (SELECT COUNT(*) FROM ` + seg + ` WHERE sku = ?) FROM ` + holds +
			` WHERE sku = ? AND state = 'held'`,
	}
	s.grab = take + ` RETURNING available`
	switch eng {
	case sqldialect.MySQL:
		s.grab = `UPDATE ` + seg + ` SET available = LAST_INSERT_ID(available - ?) WHERE sku = ? AND seg = ? AND available >= ? AND NOT ` + expired
	case sqldialect.Postgres: // one statement: the others' sum as of its snapshot, and the segment after the write
		s.grab = `WITH u AS (` + s.grab + `)
SELECT u.available + (SELECT ` + sum + ` FROM ` + seg + ` WHERE sku = ? AND seg <> ?) FROM u`
	}
	read := `SELECT seg, available, ` + expired + ` FROM ` + seg + ` WHERE sku = ? ORDER BY seg`
	switch eng {
	case sqldialect.MySQL:
		s.create = []string{`CREATE TABLE IF NOT EXISTS ` + seg + ` (
	sku VARBINARY(255) NOT NULL,
	seg INT NOT NULL,
	available BIGINT NOT NULL CHECK (available >= 0),
	PRIMARY KEY (sku, seg)
) ENGINE=InnoDB`}
		s.lock = []string{read + ` FOR UPDATE`}
		s.upsert = `INSERT INTO ` + seg + ` (sku, seg, available) VALUES %s ON DUPLICATE KEY UPDATE available = VALUES(available)`
	case sqldialect.Postgres:
		s.create = []string{`CREATE TABLE IF NOT EXISTS ` + seg + ` (
	sku TEXT COLLATE "C" NOT NULL,
	seg INTEGER NOT NULL,
	available BIGINT NOT NULL CHECK (available >= 0),
	PRIMARY KEY (sku, seg)
)`}
		s.lock = []string{read + ` FOR UPDATE`}
		s.upsert = `INSERT INTO ` + seg + ` (sku, seg, available) VALUES %s ON CONFLICT (sku, seg) DO UPDATE SET available = excluded.available`
	default: // SQLite: a write takes the database's write lock before the read (see sqldialect's sqlite.go)
		s.create = []string{`CREATE TABLE IF NOT EXISTS ` + seg + ` (
	sku TEXT NOT NULL,
	seg INTEGER NOT NULL,
	available INTEGER NOT NULL CHECK (available >= 0),
	PRIMARY KEY (sku, seg)
)`}
		s.lock = []string{`UPDATE ` + seg + ` SET available = available WHERE sku = ?`, read}
		s.upsert = `INSERT INTO ` + seg + ` (sku, seg, available) VALUES %s ON CONFLICT (sku, seg) DO UPDATE SET available = excluded.available`
	}
	if eng == sqldialect.Postgres {
		s.take, s.total, s.peek, s.clear, s.grab = rebind(s.take), rebind(s.total), rebind(s.peek), rebind(s.clear), rebind(s.grab)
		s.held = rebind(s.held)
		for i := range s.lock {
			s.lock[i] = rebind(s.lock[i])
		}
	}
	return s
}

func rebind(q string) string { return sqlx.Rebind(sqlx.DOLLAR, q) }

// upsertOf returns the statement that sets n segments of a SKU.
func (s *statements) upsertOf(eng sqldialect.Engine, n int) string {
	q := fmt.Sprintf(s.upsert, strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", n), ", "))
	if eng == sqldialect.Postgres {
		q = rebind(q)
	}
	return q
}
