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

	// The upserts, RETURNING and the tables (over SQLite's column types)
	// are PostgreSQL's.
	Init:    postgresSQL.Init,
	Move:    postgresSQL.Move,
	Shift:   postgresSQL.Shift,
	Insert:  postgresSQL.Insert,
	Reserve: postgresSQL.Reserve,
	Create:  postgresSQL.Create,
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
