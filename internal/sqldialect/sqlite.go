package sqldialect

import (
	"errors"
	"strings"
)

// sqliteSQL is the SQL for SQLite.
//
// SQLite has no row locks: lock is an UPDATE that changes nothing, which
// takes the database's write lock before anything is read, whatever the
// DSN's _txlock, and so is SQLite's FOR UPDATE. TEXT compares with the
// BINARY collation: bytes.
var sqliteSQL = statements{
	quote: `"`,

	get:  `SELECT {{.Stock}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	read: `SELECT {{.Stock}}, {{.Version}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	lock: `UPDATE {{.Table}} SET {{.Version}} = {{.Version}} WHERE {{.SKU}} = ?
		RETURNING {{.Stock}}, {{.Version}}`,
	init: `INSERT INTO {{.Table}} ({{.SKU}}, {{.Stock}}, {{.Version}}) VALUES (?, ?, 1)
		ON CONFLICT ({{.SKU}}) DO UPDATE SET {{.Stock}} = excluded.{{.Stock}}, {{.Version}} = {{.Table}}.{{.Version}} + 1`,
	set: `UPDATE {{.Table}} SET {{.Stock}} = ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Version}} = ?`,
	move: `UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
		RETURNING {{.Stock}}`,

	seen: `SELECT remaining FROM {{.Ledger}}
		WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at > ?`,
	peek: `SELECT t.{{.Stock}}, l.remaining FROM {{.Table}} t
		LEFT JOIN {{.Ledger}} l ON l.sku = t.{{.SKU}} AND l.dir = ? AND l.idem_key = ? AND l.expires_at > ?
		WHERE t.{{.SKU}} = ?`,
	renew: `UPDATE {{.Ledger}} SET remaining = ?, expires_at = ?
		WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at <= ?`,
	prune: `DELETE FROM {{.Ledger}}
		WHERE rowid IN (SELECT rowid FROM {{.Ledger}} WHERE expires_at <= ? LIMIT 1000)`,
	keys: `SELECT dir, idem_key, remaining, expires_at FROM {{.Ledger}}
		WHERE sku = ? AND idem_key IN ({{rows "?"}})`,
	insert: `INSERT INTO {{.Ledger}} (sku, dir, idem_key, remaining, expires_at)
		VALUES {{rows "(?, ?, ?, ?, ?)"}}
		ON CONFLICT DO NOTHING`,

	create: []string{
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
