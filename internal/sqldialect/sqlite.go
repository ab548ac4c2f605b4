package sqldialect

import (
	"errors"
	"strings"
)

// sqliteSQL is the SQL for SQLite.
//
// SQLite has no row locks: lock is an UPDATE that changes nothing, which
// takes the database's write lock before anything is read, whatever the
// DSN's _txlock, and so is SQLite's FOR UPDATE (lockHolds, lockLine and
// lockOrder too). Every transaction must write before it reads: one that
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

	Get:  `SELECT {{.Stock}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	Read: `SELECT {{.Stock}}, {{.Version}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	Lock: `UPDATE {{.Table}} SET {{.Version}} = {{.Version}} WHERE {{.SKU}} = ?
		RETURNING {{.Stock}}, {{.Version}}`,
	Init: `INSERT INTO {{.Table}} ({{.SKU}}, {{.Stock}}, {{.Version}}) VALUES (?, ?, 1)
		ON CONFLICT ({{.SKU}}) DO UPDATE SET {{.Stock}} = excluded.{{.Stock}}, {{.Version}} = {{.Table}}.{{.Version}} + 1`,
	Set: `UPDATE {{.Table}} SET {{.Stock}} = ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Version}} = ?`,
	Move: `UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
			AND NOT EXISTS (SELECT 1 FROM {{.Holds}} h
				WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		RETURNING {{.Stock}}`,

	Shift: `UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
		RETURNING {{.Stock}}`,

	Seen: `SELECT remaining FROM {{.Ledger}}
		WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at > ?`,
	Peek: `SELECT t.{{.Stock}}, l.remaining, (SELECT COALESCE(SUM(h.qty), 0) FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t
		LEFT JOIN {{.Ledger}} l ON l.sku = t.{{.SKU}} AND l.dir = ? AND l.idem_key = ? AND l.expires_at > ?
		WHERE t.{{.SKU}} = ?`,
	Renew: `UPDATE {{.Ledger}} SET remaining = ?, expires_at = ?
		WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at <= ?`,
	Prune: `DELETE FROM {{.Ledger}}
		WHERE rowid IN (SELECT rowid FROM {{.Ledger}} WHERE expires_at <= ? LIMIT 1000)`,
	Keys: `SELECT dir, idem_key, remaining, expires_at FROM {{.Ledger}}
		WHERE sku = ? AND idem_key IN ({{rows "?"}})`,
	Insert: `INSERT INTO {{.Ledger}} (sku, dir, idem_key, remaining, expires_at)
		VALUES {{rows "(?, ?, ?, ?, ?)"}}
		ON CONFLICT DO NOTHING`,

	ReadHolds: `SELECT t.{{.SKU}}, t.{{.Stock}}, t.{{.Version}}, EXISTS (SELECT 1 FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t WHERE t.{{.SKU}} IN ({{rows "?"}})`,
	LockHolds: `UPDATE {{.Table}} SET {{.Version}} = {{.Version}} WHERE {{.SKU}} = ?
		RETURNING {{.Stock}}, {{.Version}}, EXISTS (SELECT 1 FROM {{.Holds}} h
			WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})`,
	Expired: `SELECT hold_id, qty FROM {{.Holds}}
		WHERE sku = ? AND state = 'held' AND expires_at <= {{.Now}}
		ORDER BY expires_at LIMIT {{.MaxRelease}}`,
	Release: `UPDATE {{.Holds}} SET state = 'expired', ended_at = {{.Now}}
		WHERE sku = ? AND state = 'held' AND hold_id IN ({{rows "?"}})`,
	Reserve: `INSERT INTO {{.Holds}} (hold_id, sku, qty, state, expires_at)
		VALUES {{rows (printf "(?, ?, ?, 'held', %s + ?)" .Now)}}
		ON CONFLICT DO NOTHING`,
	Lines: `SELECT sku, qty, state, expires_at, ended_at, {{.Now}} FROM {{.Holds}}
		WHERE hold_id = ? ORDER BY sku`,
	LockLines: `SELECT sku, qty, state, expires_at, ended_at, {{.Now}} FROM {{.Holds}}
		WHERE hold_id = ? ORDER BY sku`,
	Confirm: `UPDATE {{.Holds}} SET state = 'confirmed', ended_at = {{.Now}}
		WHERE hold_id = ? AND state = 'held' AND expires_at > {{.Now}}`,
	End: `UPDATE {{.Holds}} SET state = ?, ended_at = {{.Now}}
		WHERE hold_id = ? AND state = 'held'`,
	Forget: `DELETE FROM {{.Holds}}
		WHERE hold_id = ? AND state <> 'held' AND ended_at <= {{.Now}} - ?`,
	Held: `SELECT COALESCE(SUM(h.qty), 0) FROM {{.Table}} t
		LEFT JOIN {{.Holds}} h ON h.sku = t.{{.SKU}} AND h.state = 'held'
		WHERE t.{{.SKU}} = ? GROUP BY t.{{.SKU}}`,
	Due: `SELECT DISTINCT hold_id FROM {{.Holds}}
		WHERE state = 'held' AND expires_at <= {{.Now}} LIMIT ?`,
	PruneHolds: `DELETE FROM {{.Holds}}
		WHERE rowid IN (SELECT rowid FROM {{.Holds}} WHERE ended_at <= {{.Now}} - ? LIMIT 1000)`,

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
