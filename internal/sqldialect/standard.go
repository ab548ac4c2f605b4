package sqldialect

// standardSQL is the statements the engines run as they are: plain
// SELECTs, the version compare-and-set and the conditional UPDATEs of the
// ledger and the holds, which need no upsert, no RETURNING and no bounded
// DELETE (PostgreSQL casts Peek's and Held's sums back to BIGINT; SQLite's
// LockLines is Lines). [Build] takes an engine's statement from here when the
// engine's file (mysql.go, postgres.go, sqlite.go) leaves it empty; each
// engine's file holds what differs.
var standardSQL = Statements{
	Get:  `SELECT {{.Stock}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	Read: `SELECT {{.Stock}}, {{.Version}} FROM {{.Table}} WHERE {{.SKU}} = ?`,
	Set: `UPDATE {{.Table}} SET {{.Stock}} = ?, {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Version}} = ?`,
	Seen: `SELECT remaining FROM {{.Ledger}}
		WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at > ?`,
	Renew: `UPDATE {{.Ledger}} SET remaining = ?, expires_at = ?
		WHERE sku = ? AND dir = ? AND idem_key = ? AND expires_at <= ?`,
	Keys: `SELECT dir, idem_key, remaining, expires_at FROM {{.Ledger}}
		WHERE sku = ? AND idem_key IN ({{rows "?"}})`,
	Expired: `SELECT hold_id, qty FROM {{.Holds}}
		WHERE sku = ? AND state = 'held' AND expires_at <= {{.Now}}
		ORDER BY expires_at LIMIT {{.MaxRelease}}`,
	Peek: `SELECT t.{{.Stock}}, l.remaining, (SELECT COALESCE(SUM(h.qty), 0) FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t
		LEFT JOIN {{.Ledger}} l ON l.sku = t.{{.SKU}} AND l.dir = ? AND l.idem_key = ? AND l.expires_at > ?
		WHERE t.{{.SKU}} = ?`,
	Held: `SELECT COALESCE(SUM(h.qty), 0) FROM {{.Table}} t
		LEFT JOIN {{.Holds}} h ON h.sku = t.{{.SKU}} AND h.state = 'held'
		WHERE t.{{.SKU}} = ? GROUP BY t.{{.SKU}}`,
	Lines: `SELECT sku, qty, state, expires_at, ended_at, {{.Now}} FROM {{.Holds}}
		WHERE hold_id = ? ORDER BY sku`,
	LockLines: `SELECT sku, qty, state, expires_at, ended_at, {{.Now}} FROM {{.Holds}}
		WHERE hold_id = ? ORDER BY sku FOR UPDATE`,
	Confirm: `UPDATE {{.Holds}} SET state = 'confirmed', ended_at = {{.Now}}
		WHERE hold_id = ? AND state = 'held' AND expires_at > {{.Now}}`,
	End: `UPDATE {{.Holds}} SET state = ?, ended_at = {{.Now}}
		WHERE hold_id = ? AND state = 'held'`,
	Forget: `DELETE FROM {{.Holds}}
		WHERE hold_id = ? AND state <> 'held' AND ended_at <= {{.Now}} - ?`,
	Due: `SELECT DISTINCT hold_id FROM {{.Holds}}
		WHERE state = 'held' AND expires_at <= {{.Now}} LIMIT ?`,
	ReadHolds: `SELECT t.{{.SKU}}, t.{{.Stock}}, t.{{.Version}}, EXISTS (SELECT 1 FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t WHERE t.{{.SKU}} IN ({{rows "?"}})`,
	Release: `UPDATE {{.Holds}} SET state = 'expired', ended_at = {{.Now}}
		WHERE sku = ? AND state = 'held' AND hold_id IN ({{rows "?"}})`,
}
