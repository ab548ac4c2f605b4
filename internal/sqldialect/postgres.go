package sqldialect

import "errors"

// postgresSQL is the SQL for PostgreSQL. It is written with ? placeholders,
// numbered $1, $2, ... when built.
//
// The lock timeout is SET LOCAL, so it ends with the transaction. TEXT
// COLLATE "C" compares bytes, as MySQL's VARBINARY does. A bounded DELETE
// goes through ctid, PostgreSQL having no DELETE ... LIMIT.
var postgresSQL = statements{
	quote: `"`,

	get:         `SELECT {{.Stock}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	read:        `SELECT {{.Stock}}, {{.Version}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	lockTimeout: `{{with .LockTimeoutMillis}}SET LOCAL lock_timeout = {{.}}{{end}}`,
	lock:        `SELECT {{.Stock}}, {{.Version}} FROM {{.Table}} WHERE {{.SKU}} = ? FOR UPDATE`,
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
		WHERE ctid = ANY(ARRAY(SELECT ctid FROM {{.Ledger}} WHERE expires_at <= ? LIMIT 1000))`,
	keys: `SELECT dir, idem_key, remaining, expires_at FROM {{.Ledger}}
		WHERE sku = ? AND idem_key IN ({{rows "?"}})`,
	insert: `INSERT INTO {{.Ledger}} (sku, dir, idem_key, remaining, expires_at)
		VALUES {{rows "(?, ?, ?, ?, ?)"}}
		ON CONFLICT DO NOTHING`,

	create: []string{
		`CREATE TABLE IF NOT EXISTS {{.Table}} (
			{{.SKU}} TEXT COLLATE "C" NOT NULL PRIMARY KEY,
			{{.Stock}} BIGINT NOT NULL CHECK ({{.Stock}} >= 0),
			{{.Version}} BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE TABLE IF NOT EXISTS {{.Ledger}} (
			sku TEXT COLLATE "C" NOT NULL,
			dir TEXT COLLATE "C" NOT NULL,
			idem_key TEXT COLLATE "C" NOT NULL,
			remaining BIGINT NOT NULL,
			expires_at BIGINT NOT NULL,
			PRIMARY KEY (sku, dir, idem_key)
		)`,
		`CREATE INDEX IF NOT EXISTS {{.Index}} ON {{.Ledger}} (expires_at)`,
	},
}

// postgresContention reports a serialization failure (40001), a deadlock
// (40P01) or a lock timeout (55P03), from pgx's *pgconn.PgError or
// lib/pq's *pq.Error, both of which have SQLState.
func postgresContention(err error) bool {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return false
	}
	switch e.SQLState() {
	case "40001", "40P01", "55P03":
		return true
	}
	return false
}
