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
// into SQL is the table names, validated by sqlengine.New and quoted.
type statements struct {
	create []string // the segments table
	take   string   // take qty from one segment, if it has them
	grab   string   // take, autocommit, returning the segment's stock after (MySQL: through LAST_INSERT_ID) or, on PostgreSQL, the SKU's sum
	total  string   // the sum of a SKU's segments and their count
	peek   string   // total, and the remaining of an unexpired key
	lock   []string // lock every segment row of a SKU, then read them in seg order
	clear  string   // delete a SKU's segments from seg on
	upsert string   // rows "(?, ?, ?)" written out per call: set segments' stock
}

// build writes eng's statements over the segments table seg and the keys
// table keys, both names plain identifiers.
func build(eng sqldialect.Engine, seg, keys string) statements {
	q := `"`
	if eng == sqldialect.MySQL {
		q = "`"
	}
	seg, keys = q+seg+q, q+keys+q
	sum := `COALESCE(SUM(available), 0)`
	switch eng {
	case sqldialect.MySQL:
		sum = `CAST(` + sum + ` AS SIGNED)`
	case sqldialect.Postgres:
		sum += `::BIGINT`
	}
	s := statements{
		take:  `UPDATE ` + seg + ` SET available = available - ? WHERE sku = ? AND seg = ? AND available >= ?`,
		total: `SELECT ` + sum + `, COUNT(*) FROM ` + seg + ` WHERE sku = ?`,
		peek: `SELECT ` + sum + `, COUNT(*), (SELECT remaining FROM ` + keys +
			` WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at > ?) FROM ` + seg + ` WHERE sku = ?`,
		clear: `DELETE FROM ` + seg + ` WHERE sku = ? AND seg >= ?`,
	}
	s.grab = `UPDATE ` + seg + ` SET available = available - ? WHERE sku = ? AND seg = ? AND available >= ? RETURNING available`
	switch eng {
	case sqldialect.MySQL:
		s.grab = `UPDATE ` + seg + ` SET available = LAST_INSERT_ID(available - ?) WHERE sku = ? AND seg = ? AND available >= ?`
	case sqldialect.Postgres: // one statement: the others' sum as of its snapshot, and the segment after the write
		s.grab = `WITH u AS (` + strings.TrimSuffix(s.grab, ` RETURNING available`) + ` RETURNING available)
SELECT u.available + (SELECT ` + sum + ` FROM ` + seg + ` WHERE sku = ? AND seg <> ?) FROM u`
	}
	read := `SELECT seg, available FROM ` + seg + ` WHERE sku = ? ORDER BY seg`
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
