// Package ledgerguard makes a SQL strategy's test database refuse an
// idempotency key written outside the transaction that moves its stock.
//
// The key and the stock move must commit together (a call that did not
// take effect never uses up its key). A key written through the pool, by a
// statement of its own, commits even when the move's transaction then
// fails, and no outcome a test observes in a healthy run tells the two
// apart. So the guard has the database check it at the write:
//
//   - MariaDB/MySQL and PostgreSQL ([Install]): a trigger on the ledger
//     refuses a row inserted by a statement of its own in autocommit mode
//     (MariaDB/MySQL: @@in_transaction is 0; PostgreSQL: the transaction
//     has no id yet, which its first write, or row lock, assigns).
//   - SQLite ([SQLite]): a database whose busy timeout is zero. The move's
//     transaction holds the write lock, so a write through another
//     connection of the pool fails at once with "database is locked"
//     instead of waiting out the usual busy timeout, while calls made one
//     at a time never wait for a lock.
package ledgerguard

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// Message is the error text of the triggers. It has no quote, so it goes
// into their SQL as it is.
const Message = "ledgerguard: a key written by a statement of its own, outside the transaction of the move"

// Install adds the guard to schema's ledger on db (MariaDB/MySQL or
// PostgreSQL; SQLite needs none, see [SQLite]) until the end of t.
func Install(t testing.TB, db *sqlx.DB, schema sqlstore.Schema) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "guard_" + testenv.Prefix()
	var stmts []string
	switch db.DriverName() {
	case "mysql":
		// @@in_transaction is 0 in an INSERT of its own in autocommit
		// mode, 1 in a transaction begun before it.
		stmts = []string{"CREATE TRIGGER `" + name + "` BEFORE INSERT ON `" + schema.Ledger + "` FOR EACH ROW " +
			"IF @@in_transaction = 0 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '" + Message + "'; END IF"}
		t.Cleanup(func() { _, _ = db.Exec("DROP TRIGGER IF EXISTS `" + name + "`") })
	case "pgx", "postgres":
		// A transaction gets its id at its first write: before a BEFORE
		// ROW trigger of an INSERT of its own, it has none.
		stmts = []string{`CREATE FUNCTION "` + name + `"() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF pg_catalog.txid_current_if_assigned() IS NULL THEN
					RAISE EXCEPTION '` + Message + `';
				END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER "` + name + `" BEFORE INSERT ON "` + schema.Ledger + `" FOR EACH ROW EXECUTE FUNCTION "` + name + `"()`}
		t.Cleanup(func() { _, _ = db.Exec(`DROP FUNCTION IF EXISTS "` + name + `"() CASCADE`) })
	default:
		t.Fatalf("ledgerguard.Install: no guard for driver %q (SQLite: use ledgerguard.SQLite)", db.DriverName())
	}
	for _, q := range stmts {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
}

// SQLite returns a pool on a fresh SQLite file in t's temporary directory,
// as testenv.SQLite does but with a busy timeout of zero: a write that
// would wait for a lock fails at once. Use it for calls made one at a
// time.
func SQLite(t testing.TB) *sqlx.DB {
	t.Helper()
	if !slices.Contains(sql.Drivers(), "sqlite") {
		testenv.SQLite(t) // skips, or fails with CI=true, saying how to link the driver
	}
	dsn := "file:" + t.TempDir() + "/stock.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(0)&_txlock=immediate"
	db, err := sqlx.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(8)
	return db
}
