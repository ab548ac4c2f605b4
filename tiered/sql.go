package tiered

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect"
)

// statements is the SQL of one engine. {{p}} stands for the table prefix.
type statements struct {
	create []string
	drop   []string

	// lock returns pool, gen, last_grant of a SKU FOR UPDATE (read, in
	// sharedStatements, without the lock).
	lock string
	// initUpsert sets a SKU's pool and starts a new generation.
	initUpsert string
	// seen lists which of a SKU's journal entries are in the ledger, and
	// record adds entries to it: each is followed by one placeholder group
	// per entry (written with ?, see ledgerSQL), record then by recordEnd.
	seen, record, recordEnd string
	// seenEntry finds a journal entry (sku, entry id) in the ledger, or
	// below the SKU's prune mark.
	seenEntry string
	// mark reads a SKU's prune mark and locks its row (the first statement
	// of a sync or prune transaction). See prune.go.
	mark string
	// keysPut records idempotency keys (keys.go): followed by one
	// placeholder group of seven per key (written with ?), then by
	// keysPutEnd, which overwrites an expired record.
	keysPut, keysPutEnd string
	// The engine-neutral statements of keys.go, written with ? and bound
	// to the engine by engineSQL.
	keyStatements
	// The other statements that are the same on every engine, bound
	// likewise.
	sharedStatements
	// The movement ledger's (ledger.go), run only WithLedger: lcreate
	// creates its table; lhead reads a SKU's generation and the stock
	// after its last row; linsert (followed by lrow groups, written ?)
	// writes rows; lpage reads a page. lrow is one row's values: seven
	// placeholders, the last moved_at, the database's clock when nil.
	lcreate                     []string
	lhead, linsert, lpage, lrow string
}

// The engine-neutral statements of the movement ledger, bound by engineSQL
// (linsert at the call). A row holds n records (recs, see ledger.go) and
// the stock after the last (available, held, sold).
const (
	lheadSQL = `SELECT s.gen, COALESCE(v.available, 0), COALESCE(v.held, 0), COALESCE(v.sold, 0)
		FROM {{p}}stock s LEFT JOIN {{p}}moves v ON v.pos = (SELECT MAX(pos) FROM {{p}}moves WHERE sku = s.sku)
		WHERE s.sku = ?`
	linsertSQL = `INSERT INTO {{p}}moves (sku, n, available, held, sold, recs, moved_at) VALUES `
	lpageSQL   = `SELECT pos, n, available, held, sold, recs, moved_at FROM {{p}}moves
		WHERE sku = ? AND pos >= ? ORDER BY pos LIMIT ?`
)

// lnowSQL is each engine's clock in Unix µs, as internal/sqldialect reads
// it for the SQL strategies' holds: the time of the ledger rows that no
// Redis journal entry dates (Init, the fallback, write-offs, give-backs).
var lnowSQL = map[sqldialect.Engine]string{
	sqldialect.MySQL:    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))",
	sqldialect.Postgres: `(EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT`,
	sqldialect.SQLite:   `CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)`,
}

// lcreateSQL is each engine's movement ledger table: pos, an
// auto-increment key; moved_at in Unix µs.
var lcreateSQL = map[sqldialect.Engine][]string{
	sqldialect.MySQL: {`CREATE TABLE IF NOT EXISTS {{p}}moves (
			pos BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			sku VARBINARY(255) NOT NULL,
			n INT NOT NULL,
			available BIGINT NOT NULL,
			held BIGINT NOT NULL,
			sold BIGINT NOT NULL,
			recs MEDIUMBLOB NOT NULL,
			moved_at BIGINT NOT NULL,
			KEY (sku, pos)
		) ENGINE=InnoDB`},
	sqldialect.Postgres: {`CREATE TABLE IF NOT EXISTS {{p}}moves (
			pos BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			sku TEXT COLLATE "C" NOT NULL,
			n INT NOT NULL,
			available BIGINT NOT NULL,
			held BIGINT NOT NULL,
			sold BIGINT NOT NULL,
			recs TEXT NOT NULL,
			moved_at BIGINT NOT NULL
		)`, `CREATE INDEX IF NOT EXISTS {{p}}moves_by_sku ON {{p}}moves (sku, pos)`},
	sqldialect.SQLite: {`CREATE TABLE IF NOT EXISTS {{p}}moves (
			pos INTEGER PRIMARY KEY AUTOINCREMENT,
			sku TEXT NOT NULL,
			n INTEGER NOT NULL,
			available INTEGER NOT NULL,
			held INTEGER NOT NULL,
			sold INTEGER NOT NULL,
			recs TEXT NOT NULL,
			moved_at INTEGER NOT NULL
		)`, `CREATE INDEX IF NOT EXISTS {{p}}moves_by_sku ON {{p}}moves (sku, pos)`},
}

// sharedStatements are the statements that are the same on every engine,
// written with ? and {{p}}, bound by engineSQL.
type sharedStatements struct {
	// read returns pool, gen, last_grant of a SKU.
	read string
	// initGen reads the generation back in Init's transaction; initGrants
	// deletes the grants of older generations.
	initGen, initGrants string
	// grant takes units from the pool; grantRow records the grant;
	// grantsAfter lists a generation's grants after an id.
	grant, grantRow, grantsAfter string
	// apply adds synced moves (sold, returned, held) to the SKU's row of
	// the entries' generation; lose adds to the units Redis lost.
	apply, lose string
	// setMark raises a SKU's prune mark; prune deletes the ledger rows
	// below it. See prune.go.
	setMark, prune string
	// direct moves the pool by a fallback call (Reduce: -q, Return: q)
	// and counts it in direct (net units SQL sold on its own).
	direct string
	// skus lists every SKU; totals reads the figures Reconcile and tests
	// compare.
	skus, totals string
	// held reads the units SQL knows held (synced) and the generation;
	// unhold forgets them (Reconcile, once Redis lost them).
	held, unhold string
}

// sharedSQL is sharedStatements, with {{p}} for the table prefix.
var sharedSQL = sharedStatements{
	read:        `SELECT pool, gen, last_grant FROM {{p}}stock WHERE sku = ?`,
	initGen:     `SELECT gen FROM {{p}}stock WHERE sku = ?`,
	initGrants:  `DELETE FROM {{p}}grants WHERE sku = ? AND gen < ?`,
	grant:       `UPDATE {{p}}stock SET pool = pool - ?, last_grant = ? WHERE sku = ? AND gen = ?`,
	grantRow:    `INSERT INTO {{p}}grants (sku, gen, grant_id, qty) VALUES (?, ?, ?, ?)`,
	grantsAfter: `SELECT grant_id, qty FROM {{p}}grants WHERE sku = ? AND gen = ? AND grant_id > ? ORDER BY grant_id`,
	setMark:     `UPDATE {{p}}stock SET pruned_ms = ? WHERE sku = ? AND pruned_ms < ?`,
	prune:       `DELETE FROM {{p}}synced WHERE sku = ? AND ms < ?`,
	lose:        `UPDATE {{p}}stock SET lost = lost + ? WHERE sku = ? AND gen = ?`,
	apply:       `UPDATE {{p}}stock SET sold = sold + ?, returned = returned + ?, held = held + ? WHERE sku = ? AND gen = ?`,
	direct:      `UPDATE {{p}}stock SET pool = pool + ?, direct = direct - ? WHERE sku = ?`,
	skus:        `SELECT sku FROM {{p}}stock ORDER BY sku`,
	held:        `SELECT held, gen FROM {{p}}stock WHERE sku = ?`,
	unhold:      `UPDATE {{p}}stock SET held = 0 WHERE sku = ? AND gen = ?`,
	totals: `SELECT s.pool, s.sold, s.returned, s.direct, s.lost, s.gen, s.last_grant,
			(SELECT COALESCE(SUM(g.qty), 0) FROM {{p}}grants g WHERE g.sku = s.sku AND g.gen = s.gen)
		FROM {{p}}stock s WHERE s.sku = ?`,
}

// keyStatements are the statements of the keys table and of the double
// applications (keys.go), the same on every engine.
type keyStatements struct {
	// keysFind lists the records of a SKU's keys, followed by one
	// placeholder per key (written with ?, bound at the call); keysExpire deletes a SKU's expired records;
	// keysLive lists those the fallback wrote that have not expired
	// (recovery copies them into Redis).
	keysFind, keysExpire, keysLive string
	// pairs adds double applications found and the units given back for
	// them (moving the pool and the direct sales as a fallback Return
	// does); pairsRead reads them with the pool and generation;
	// pairsReset zeroes them (Reconcile reported them).
	pairs, pairsRead, pairsReset string
}

// keysUpsert ends keysPut on PostgreSQL and SQLite.
const keysUpsert = ` ON CONFLICT (sku, dir, k) DO UPDATE SET qty = excluded.qty, rem = excluded.rem, src = excluded.src,
	expires_ms = excluded.expires_ms`

// keySQL is keyStatements, with {{p}} for the table prefix.
var keySQL = keyStatements{
	keysFind:   `SELECT dir, k, rem, src, expires_ms FROM {{p}}keys WHERE sku = ? AND k IN `,
	keysExpire: `DELETE FROM {{p}}keys WHERE sku = ? AND expires_ms <= ?`,
	keysLive:   `SELECT dir, k, rem, expires_ms FROM {{p}}keys WHERE sku = ? AND src = 'sql' AND expires_ms > ?`,
	pairs: `UPDATE {{p}}stock SET pool = pool + ?, direct = direct - ?, doubled = doubled + ?, given_back = given_back + ?
		WHERE sku = ?`,
	pairsRead:  `SELECT pool, gen, doubled, given_back FROM {{p}}stock WHERE sku = ?`,
	pairsReset: `UPDATE {{p}}stock SET doubled = 0, given_back = 0 WHERE sku = ?`,
}

// stockColumns are the stock table's columns after sku (SQLite's with
// INTEGER for BIGINT).
const stockColumns = `
			pool BIGINT NOT NULL CHECK (pool >= 0),
			sold BIGINT NOT NULL DEFAULT 0,
			returned BIGINT NOT NULL DEFAULT 0,
			direct BIGINT NOT NULL DEFAULT 0,
			lost BIGINT NOT NULL DEFAULT 0,
			held BIGINT NOT NULL DEFAULT 0,
			gen BIGINT NOT NULL,
			last_grant BIGINT NOT NULL DEFAULT 0,
			pruned_ms BIGINT NOT NULL DEFAULT 0,
			doubled BIGINT NOT NULL DEFAULT 0,
			given_back BIGINT NOT NULL DEFAULT 0
		`

// mysqlSQL is the SQL for MariaDB and MySQL. VARBINARY compares bytes.
var mysqlSQL = statements{
	create: []string{
		`CREATE TABLE IF NOT EXISTS {{p}}stock (
			sku VARBINARY(255) NOT NULL PRIMARY KEY,` + stockColumns + `) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS {{p}}grants (
			sku VARBINARY(255) NOT NULL,
			gen BIGINT NOT NULL,
			grant_id BIGINT NOT NULL,
			qty BIGINT NOT NULL,
			PRIMARY KEY (sku, gen, grant_id)
		) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS {{p}}synced (
			sku VARBINARY(255) NOT NULL,
			entry_id VARBINARY(64) NOT NULL,
			ms BIGINT NOT NULL,
			PRIMARY KEY (sku, entry_id),
			KEY (sku, ms)
		) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS {{p}}keys (
			sku VARBINARY(255) NOT NULL,
			dir VARBINARY(6) NOT NULL,
			k VARBINARY(255) NOT NULL,
			qty BIGINT NOT NULL,
			rem BIGINT NOT NULL,
			src VARBINARY(5) NOT NULL,
			expires_ms BIGINT NOT NULL,
			PRIMARY KEY (sku, dir, k),
			KEY (sku, expires_ms)
		) ENGINE=InnoDB`,
	},
	drop:       []string{`DROP TABLE IF EXISTS {{p}}stock, {{p}}grants, {{p}}synced, {{p}}keys, {{p}}moves`},
	keysPut:    `INSERT INTO {{p}}keys (sku, dir, k, qty, rem, src, expires_ms) VALUES `,
	keysPutEnd: ` ON DUPLICATE KEY UPDATE qty = VALUES(qty), rem = VALUES(rem), src = VALUES(src), expires_ms = VALUES(expires_ms)`,

	lock: `SELECT pool, gen, last_grant FROM {{p}}stock WHERE sku = ? FOR UPDATE`,

	initUpsert: `INSERT INTO {{p}}stock (sku, pool, sold, returned, gen, last_grant) VALUES (?, ?, 0, 0, 1, 0)
		ON DUPLICATE KEY UPDATE pool = VALUES(pool), sold = 0, returned = 0, direct = 0, lost = 0, held = 0, gen = gen + 1, last_grant = 0`,

	seen:   `SELECT entry_id FROM {{p}}synced WHERE sku = ? AND entry_id IN `,
	record: `INSERT IGNORE INTO {{p}}synced (sku, entry_id, ms) VALUES `,
	seenEntry: `SELECT 1 FROM (SELECT ? AS sku, ? AS id) x JOIN {{p}}stock s ON s.sku = x.sku
		WHERE s.pruned_ms > CAST(SUBSTRING_INDEX(x.id, '-', 1) AS UNSIGNED)
			OR EXISTS (SELECT 1 FROM {{p}}synced l WHERE l.sku = x.sku AND l.entry_id = x.id)`,
	mark: `SELECT pruned_ms FROM {{p}}stock WHERE sku = ? FOR UPDATE`,
}

// postgresSQL is the SQL for PostgreSQL. TEXT COLLATE "C" compares bytes.
var postgresSQL = statements{
	create: []string{
		`CREATE TABLE IF NOT EXISTS {{p}}stock (
			sku TEXT COLLATE "C" NOT NULL PRIMARY KEY,` + stockColumns + `)`,
		`CREATE TABLE IF NOT EXISTS {{p}}grants (
			sku TEXT COLLATE "C" NOT NULL,
			gen BIGINT NOT NULL,
			grant_id BIGINT NOT NULL,
			qty BIGINT NOT NULL,
			PRIMARY KEY (sku, gen, grant_id)
		)`,
		`CREATE TABLE IF NOT EXISTS {{p}}synced (
			sku TEXT COLLATE "C" NOT NULL,
			entry_id TEXT COLLATE "C" NOT NULL,
			ms BIGINT NOT NULL,
			PRIMARY KEY (sku, entry_id)
		)`,
		`CREATE INDEX IF NOT EXISTS {{p}}synced_ms ON {{p}}synced (sku, ms)`,
		`CREATE TABLE IF NOT EXISTS {{p}}keys (
			sku TEXT COLLATE "C" NOT NULL,
			dir TEXT NOT NULL,
			k TEXT COLLATE "C" NOT NULL,
			qty BIGINT NOT NULL,
			rem BIGINT NOT NULL,
			src TEXT NOT NULL,
			expires_ms BIGINT NOT NULL,
			PRIMARY KEY (sku, dir, k)
		)`,
		`CREATE INDEX IF NOT EXISTS {{p}}keys_expiry ON {{p}}keys (sku, expires_ms)`,
	},
	drop:       []string{`DROP TABLE IF EXISTS {{p}}stock, {{p}}grants, {{p}}synced, {{p}}keys, {{p}}moves`},
	keysPut:    `INSERT INTO {{p}}keys (sku, dir, k, qty, rem, src, expires_ms) VALUES `,
	keysPutEnd: keysUpsert,

	lock: `SELECT pool, gen, last_grant FROM {{p}}stock WHERE sku = $1 FOR UPDATE`,

	initUpsert: `INSERT INTO {{p}}stock (sku, pool, sold, returned, gen, last_grant) VALUES ($1, $2, 0, 0, 1, 0)
		ON CONFLICT (sku) DO UPDATE SET pool = excluded.pool, sold = 0, returned = 0, direct = 0, lost = 0, held = 0,
			gen = {{p}}stock.gen + 1, last_grant = 0`,

	seen:      `SELECT entry_id FROM {{p}}synced WHERE sku = ? AND entry_id IN `,
	record:    `INSERT INTO {{p}}synced (sku, entry_id, ms) VALUES `,
	recordEnd: ` ON CONFLICT DO NOTHING`,
	seenEntry: `SELECT 1 FROM {{p}}stock s WHERE s.sku = $1
		AND (s.pruned_ms > split_part($2, '-', 1)::bigint
			OR EXISTS (SELECT 1 FROM {{p}}synced l WHERE l.sku = $1 AND l.entry_id = $2))`,
	mark: `SELECT pruned_ms FROM {{p}}stock WHERE sku = $1 FOR UPDATE`,
}

// sqliteSQL is the SQL for SQLite (driver "sqlite", modernc.org/sqlite, or
// "sqlite3"). SQLite has no row locks: lock is an UPDATE that changes
// nothing, which takes the database's write lock before anything is read
// (whatever the DSN's _txlock), so a grant, a sync or a fallback call holds
// the whole database until it commits; open it in WAL mode with a busy
// timeout. TEXT compares with the BINARY collation: bytes.
var sqliteSQL = statements{
	create: []string{
		`CREATE TABLE IF NOT EXISTS {{p}}stock (
			sku TEXT NOT NULL PRIMARY KEY,` + strings.ReplaceAll(stockColumns, "BIGINT", "INTEGER") + `)`,
		`CREATE TABLE IF NOT EXISTS {{p}}grants (
			sku TEXT NOT NULL,
			gen INTEGER NOT NULL,
			grant_id INTEGER NOT NULL,
			qty INTEGER NOT NULL,
			PRIMARY KEY (sku, gen, grant_id)
		) WITHOUT ROWID`,
		`CREATE TABLE IF NOT EXISTS {{p}}synced (
			sku TEXT NOT NULL,
			entry_id TEXT NOT NULL,
			ms INTEGER NOT NULL,
			PRIMARY KEY (sku, entry_id)
		) WITHOUT ROWID`,
		`CREATE INDEX IF NOT EXISTS {{p}}synced_ms ON {{p}}synced (sku, ms)`,
		`CREATE TABLE IF NOT EXISTS {{p}}keys (
			sku TEXT NOT NULL,
			dir TEXT NOT NULL,
			k TEXT NOT NULL,
			qty INTEGER NOT NULL,
			rem INTEGER NOT NULL,
			src TEXT NOT NULL,
			expires_ms INTEGER NOT NULL,
			PRIMARY KEY (sku, dir, k)
		) WITHOUT ROWID`,
		`CREATE INDEX IF NOT EXISTS {{p}}keys_expiry ON {{p}}keys (sku, expires_ms)`,
	},
	drop: []string{`DROP TABLE IF EXISTS {{p}}stock`, `DROP TABLE IF EXISTS {{p}}grants`, `DROP TABLE IF EXISTS {{p}}synced`,
		`DROP TABLE IF EXISTS {{p}}keys`, `DROP TABLE IF EXISTS {{p}}moves`},
	keysPut:    `INSERT INTO {{p}}keys (sku, dir, k, qty, rem, src, expires_ms) VALUES `,
	keysPutEnd: keysUpsert,

	lock: `UPDATE {{p}}stock SET gen = gen WHERE sku = ? RETURNING pool, gen, last_grant`,

	initUpsert: `INSERT INTO {{p}}stock (sku, pool, sold, returned, gen, last_grant) VALUES (?, ?, 0, 0, 1, 0)
		ON CONFLICT (sku) DO UPDATE SET pool = excluded.pool, sold = 0, returned = 0, direct = 0, lost = 0, held = 0,
			gen = {{p}}stock.gen + 1, last_grant = 0`,

	seen:      `SELECT entry_id FROM {{p}}synced WHERE sku = ? AND entry_id IN `,
	record:    `INSERT INTO {{p}}synced (sku, entry_id, ms) VALUES `,
	recordEnd: ` ON CONFLICT DO NOTHING`,
	seenEntry: `SELECT 1 FROM {{p}}stock s WHERE s.sku = ?1
		AND (s.pruned_ms > CAST(substr(?2, 1, instr(?2, '-') - 1) AS INTEGER)
			OR EXISTS (SELECT 1 FROM {{p}}synced l WHERE l.sku = ?1 AND l.entry_id = ?2))`,
	mark: `UPDATE {{p}}stock SET gen = gen WHERE sku = ? RETURNING pruned_ms`,
}

// identifier is what a table prefix may be: it begins a plain identifier.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,39}$`)

// engineSQL returns the statements for db.DriverName(), with prefix in
// place of {{p}}.
func engineSQL(driver, prefix string) (statements, error) {
	eng, err := sqldialect.EngineOf(driver)
	if err != nil {
		return statements{}, fmt.Errorf("tiered: %w", err)
	}
	s := map[sqldialect.Engine]statements{sqldialect.MySQL: mysqlSQL, sqldialect.Postgres: postgresSQL, sqldialect.SQLite: sqliteSQL}[eng]
	s.keyStatements, s.sharedStatements = keySQL, sharedSQL
	s.lcreate, s.lhead, s.linsert, s.lpage = lcreateSQL[eng], lheadSQL, linsertSQL, lpageSQL
	s.lrow = "(?, ?, ?, ?, ?, ?, COALESCE(?, " + lnowSQL[eng] + "))"
	r := strings.NewReplacer("{{p}}", prefix)
	for _, q := range []*string{&s.lock, &s.initUpsert, &s.seen, &s.record, &s.seenEntry, &s.mark, &s.keysPut, &s.keysFind} {
		*q = r.Replace(*q)
	}
	bind := sqlx.BindType(driver)
	s.linsert = r.Replace(s.linsert)
	sh := &s.sharedStatements
	for _, q := range []*string{&s.keysExpire, &s.keysLive, &s.pairs, &s.pairsRead, &s.pairsReset, &s.lhead, &s.lpage,
		&sh.read, &sh.initGen, &sh.initGrants, &sh.grant, &sh.grantRow, &sh.grantsAfter, &sh.apply, &sh.lose, &sh.setMark,
		&sh.prune, &sh.direct, &sh.skus, &sh.totals, &sh.held, &sh.unhold} {
		*q = sqlx.Rebind(bind, r.Replace(*q))
	}
	s.create = replaceAll(r, s.create)
	s.drop = replaceAll(r, s.drop)
	s.lcreate = replaceAll(r, s.lcreate)
	return s, nil
}

func replaceAll(r *strings.Replacer, qs []string) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = r.Replace(q)
	}
	return out
}
