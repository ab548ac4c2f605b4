package sqldialect

import (
	"errors"
	"strings"
)

// sqliteSQL is the SQL for SQLite.
//
// SQLite has no row locks: lockHolds is an UPDATE that changes nothing,
// which takes the database's write lock before anything is read, whatever
// the DSN's _txlock, and so is SQLite's FOR UPDATE (sqlstore's lockLine
// and lockOrder too). Every transaction must write before it reads: one that
// began DEFERRED (a DSN without _txlock=immediate) and read first holds a
// read snapshot, and SQLite refuses its first write at once with
// SQLITE_BUSY when another connection holds the write lock or wrote since
// the snapshot (it cannot wait on the busy timeout without risking a
// deadlock), whereas a first statement that writes waits for the lock.
// TEXT compares with the BINARY collation: bytes.
//
// The clock of the holds is julianday('now') as Unix microseconds (SQLite's
// clock has millisecond resolution), fixed for the length of a statement;
// julianday works with every SQLite version, unixepoch('subsec') only from
// 3.42.
var sqliteSQL = Statements{
	quote: `"`,
	now:   `CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)`,

	Prune: `DELETE FROM {{.Ledger}}
		WHERE rowid IN (SELECT rowid FROM {{.Ledger}} WHERE expires_at <= ? LIMIT 1000)`,
	PruneHolds: `DELETE FROM {{.Holds}}
		WHERE rowid IN (SELECT rowid FROM {{.Holds}} WHERE ended_at <= {{.Now}} - ? LIMIT 1000)`,

	LockHolds: `UPDATE {{.Table}} SET {{.Version}} = {{.Version}} WHERE {{.SKU}} = ?
		RETURNING {{.Stock}}, {{.Version}}, EXISTS (SELECT 1 FROM {{.Holds}} h
			WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})`,
	LockLines: standardSQL.Lines, // the transaction's write lock is its FOR UPDATE

	// The upserts, and RETURNING, are PostgreSQL's.
	Init:    postgresSQL.Init,
	Move:    postgresSQL.Move,
	Shift:   postgresSQL.Shift,
	Insert:  postgresSQL.Insert,
	Reserve: postgresSQL.Reserve,

	Create: []string{
		`CREATE TABLE IF NOT EXISTS {{.Table}} (
			{{.SKU}} TEXT NOT NULL PRIMARY KEY,
			{{.Stock}} INTEGER NOT NULL CHECK ({{.Stock}} >= 0),
			{{.Version}} INTEGER NOT NULL DEFAULT 0
		)`,
		`CREATE TABLE IF NOT EXISTS {{.Ledger}} (
			sku TEXT NOT NULL,
			dir TEXT NOT NULL,
			idem_key TEXT NOT NULL,
			remaining INTEGER NOT NULL,
			expires_at INTEGER NOT NULL,
			PRIMARY KEY (sku, dir, idem_key)
		)`,
		`CREATE INDEX IF NOT EXISTS {{.Index}} ON {{.Ledger}} (expires_at)`,
		`CREATE TABLE IF NOT EXISTS {{.Holds}} (
			hold_id TEXT NOT NULL,
			sku TEXT NOT NULL,
			qty INTEGER NOT NULL CHECK (qty > 0),
			state TEXT NOT NULL,
			expires_at INTEGER NOT NULL,
			ended_at INTEGER,
			PRIMARY KEY (hold_id, sku)
		)`,
		`CREATE INDEX IF NOT EXISTS {{.BySKU}} ON {{.Holds}} (sku, state, expires_at)`,
		`CREATE INDEX IF NOT EXISTS {{.Due}} ON {{.Holds}} (state, expires_at)`,
		`CREATE INDEX IF NOT EXISTS {{.Ended}} ON {{.Holds}} (ended_at)`,
		`CREATE TABLE IF NOT EXISTS {{.Orders}} (
			id TEXT NOT NULL PRIMARY KEY,
			order_lines TEXT NOT NULL,
			state TEXT NOT NULL,
			expires_at INTEGER NOT NULL,
			abandon_at INTEGER NOT NULL,
			due_at INTEGER NOT NULL,
			complete INTEGER NOT NULL,
			done INTEGER NOT NULL,
			kept_until INTEGER
		)`,
		`CREATE INDEX IF NOT EXISTS {{.OrdersDue}} ON {{.Orders}} (done, due_at)`,
	},
}

// sqliteContention reports SQLITE_BUSY or SQLITE_LOCKED, or one of their
// extended codes, from modernc.org/sqlite's *sqlite.Error (which has Code)
// or, for drivers without it, in the error's text.
func sqliteContention(err error) bool {
	var e interface{ Code() int }
	if errors.As(err, &e) {
		c := e.Code() & 0xff
		return c == 5 || c == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	return strings.Contains(err.Error(), "database is locked")
}
