package sqldialect

import "errors"

// postgresSQL is the SQL for PostgreSQL. It is written with ? placeholders,
// numbered $1, $2, ... when built.
//
// The tables are written over the column types of [names] (Text, Int,
// Small), so that SQLite's are the same text: on PostgreSQL TEXT COLLATE
// "C", BIGINT and SMALLINT.
//
// The lock timeout is SET LOCAL, so it ends with the transaction. TEXT
// COLLATE "C" compares bytes, as MySQL's VARBINARY does. A bounded DELETE
// goes through ctid, PostgreSQL having no DELETE ... LIMIT.
//
// The clock of the holds is statement_timestamp() as Unix microseconds: the
// server's clock when the statement began, fixed for its length (now() is
// the transaction's start, which a caller's long transaction would leave
// behind; clock_timestamp() moves within a statement).
var postgresSQL = Statements{
	quote: `"`,
	now:   `(EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT`,

	LockTimeout: `{{with .LockTimeoutMillis}}SET LOCAL lock_timeout = {{.}}{{end}}`,
	Init: `INSERT INTO {{.Table}} ({{.SKU}}, {{.Stock}}, {{.Version}}) VALUES (?, ?, 1)
		ON CONFLICT ({{.SKU}}) DO UPDATE SET {{.Stock}} = excluded.{{.Stock}}, {{.Version}} = {{.Table}}.{{.Version}} + 1`,
	Move: `UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
			AND NOT EXISTS (SELECT 1 FROM {{.Holds}} h
				WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		RETURNING {{.Stock}}`,

	Shift: `UPDATE {{.Table}} SET {{.Stock}} = {{.Stock}} + ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
		RETURNING {{.Stock}}`,

	Peek: `SELECT t.{{.Stock}}, l.remaining, (SELECT COALESCE(SUM(h.qty), 0)::BIGINT FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t
		LEFT JOIN {{.Ledger}} l ON l.sku = t.{{.SKU}} AND l.dir = ? AND l.idem_key = ? AND l.expires_at > ?
		WHERE t.{{.SKU}} = ?`,
	Prune: `DELETE FROM {{.Ledger}}
		WHERE ctid = ANY(ARRAY(SELECT ctid FROM {{.Ledger}} WHERE expires_at <= ? LIMIT 1000))`,
	Insert: `INSERT INTO {{.Ledger}} (sku, dir, idem_key, remaining, expires_at)
		VALUES {{rows "(?, ?, ?, ?, ?)"}}
		ON CONFLICT DO NOTHING`,

	LockHolds: `SELECT t.{{.Stock}}, t.{{.Version}}, EXISTS (SELECT 1 FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t WHERE t.{{.SKU}} = ? FOR UPDATE OF t`,
	Reserve: `INSERT INTO {{.Holds}} (hold_id, sku, qty, state, expires_at)
		VALUES {{rows (printf "(?, ?, ?, 'held', %s + ?)" .Now)}}
		ON CONFLICT DO NOTHING`,
	Held: `SELECT COALESCE(SUM(h.qty), 0)::BIGINT FROM {{.Table}} t
		LEFT JOIN {{.Holds}} h ON h.sku = t.{{.SKU}} AND h.state = 'held'
		WHERE t.{{.SKU}} = ? GROUP BY t.{{.SKU}}`,
	PruneHolds: `DELETE FROM {{.Holds}}
		WHERE ctid = ANY(ARRAY(SELECT ctid FROM {{.Holds}} WHERE ended_at <= {{.Now}} - ? LIMIT 1000))`,

	Create: []string{
		`CREATE TABLE IF NOT EXISTS {{.Table}} (
			{{.SKU}} {{.Text}} NOT NULL PRIMARY KEY,
			{{.Stock}} {{.Int}} NOT NULL CHECK ({{.Stock}} >= 0),
			{{.Version}} {{.Int}} NOT NULL DEFAULT 0
		)`,
		`CREATE TABLE IF NOT EXISTS {{.Ledger}} (
			sku {{.Text}} NOT NULL,
			dir {{.Text}} NOT NULL,
			idem_key {{.Text}} NOT NULL,
			remaining {{.Int}} NOT NULL,
			expires_at {{.Int}} NOT NULL,
			PRIMARY KEY (sku, dir, idem_key)
		)`,
		`CREATE INDEX IF NOT EXISTS {{.Index}} ON {{.Ledger}} (expires_at)`,
		`CREATE TABLE IF NOT EXISTS {{.Holds}} (
			hold_id {{.Text}} NOT NULL,
			sku {{.Text}} NOT NULL,
			qty {{.Int}} NOT NULL CHECK (qty > 0),
			state {{.Text}} NOT NULL,
			expires_at {{.Int}} NOT NULL,
			ended_at {{.Int}},
			PRIMARY KEY (hold_id, sku)
		)`,
		`CREATE INDEX IF NOT EXISTS {{.BySKU}} ON {{.Holds}} (sku, state, expires_at)`,
		`CREATE INDEX IF NOT EXISTS {{.Due}} ON {{.Holds}} (state, expires_at)`,
		`CREATE INDEX IF NOT EXISTS {{.Ended}} ON {{.Holds}} (ended_at)`,
		`CREATE TABLE IF NOT EXISTS {{.Orders}} (
			id {{.Text}} NOT NULL PRIMARY KEY,
			order_lines TEXT NOT NULL,
			state {{.Text}} NOT NULL,
			expires_at {{.Int}} NOT NULL,
			abandon_at {{.Int}} NOT NULL,
			due_at {{.Int}} NOT NULL,
			complete {{.Small}} NOT NULL,
			done {{.Small}} NOT NULL,
			kept_until {{.Int}}
		)`,
		`CREATE INDEX IF NOT EXISTS {{.OrdersDue}} ON {{.Orders}} (done, due_at)`,
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
