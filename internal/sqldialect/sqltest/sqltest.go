// Package sqltest runs a test once per SQL engine, on the servers that
// internal/testenv reaches, with tables unique to the test.
package sqltest

import (
	"context"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// Engine opens a pool on one engine's test database.
type Engine struct {
	Name string
	Open func(testing.TB) *sqlx.DB
}

// Conns is the pool size for the server engines: several test packages run
// at once against MariaDB (max_connections 151) and PostgreSQL (100).
const Conns = 16

// Engines are the engines every SQL strategy runs on. SQLite runs twice:
// "sqlite" begins its transactions IMMEDIATE (_txlock=immediate), and
// "sqlite-deferred" opens the database as the README shows, DEFERRED, where
// a transaction that reads before it writes cannot wait for the write lock
// (see [testenv.SQLiteDeferred]).
var Engines = []Engine{
	{"mariadb", func(t testing.TB) *sqlx.DB { return sized(testenv.MySQL(t)) }},
	{"postgres", func(t testing.TB) *sqlx.DB { return sized(testenv.Postgres(t)) }},
	{"sqlite", testenv.SQLite},
	{"sqlite-deferred", testenv.SQLiteDeferred},
}

// Benched are the engines benchmarks and soaks compare: Engines but
// sqlite-deferred, whose speed is sqlite's (the suites prove both right).
var Benched = Engines[:3]

func sized(db *sqlx.DB) *sqlx.DB {
	db.SetMaxOpenConns(Conns)
	db.SetMaxIdleConns(Conns)
	return db
}

// Open opens a pool on the engine named name, one of [Engines].
func Open(t testing.TB, name string) *sqlx.DB {
	t.Helper()
	for _, e := range Engines {
		if e.Name == name {
			return e.Open(t)
		}
	}
	t.Fatalf("no engine %q", name)
	return nil
}

// Run runs fn as one subtest per engine, in the manner of sqlx's
// RunWithSchema.
func Run(t *testing.T, fn func(t *testing.T, db *sqlx.DB)) {
	t.Helper()
	for _, e := range Engines {
		t.Run(e.Name, func(t *testing.T) { fn(t, e.Open(t)) })
	}
}

// Schema returns a schema whose table and ledger are unique to this test,
// created with sqlstore and dropped at the end of t.
func Schema(t testing.TB, db *sqlx.DB) sqlstore.Schema {
	t.Helper()
	p := testenv.Prefix()
	s := sqlstore.Schema{Table: "stock_" + p, Ledger: "ledger_" + p, Holds: "holds_" + p, Orders: "orders_" + p}
	st, err := sqlstore.New(db, sqlstore.WithSchema(s))
	require.NoError(t, err)
	require.NoError(t, st.CreateTables(context.Background()))
	Drop(t, db, s.Table, s.Ledger, s.Holds, s.Orders)
	return s
}

// Harness returns the schema for a manager of the inventorytest suite's
// subtest t: shared, or, for the order subtests ("/Orders/" in t's name),
// tables of t's own, since the suite's hold ids and Sweep are not kept
// apart by SKU.
func Harness(t *testing.T, db *sqlx.DB, shared sqlstore.Schema) sqlstore.Schema {
	if strings.Contains(t.Name(), "/Orders/") {
		return Schema(t, db)
	}
	return shared
}

// Drop drops the tables at the end of t, and with each the holds, orders
// and movement ledger tables that a schema naming it as its stock table
// gets by default (its name followed by "_holds", "_orders", "_moves"),
// if there are any.
func Drop(t testing.TB, db *sqlx.DB, tables ...string) {
	q := `"`
	if db.DriverName() == "mysql" {
		q = "`"
	}
	t.Cleanup(func() {
		for _, tb := range tables {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + q + tb + q)
			for _, d := range []string{tb[:min(len(tb), 57)] + "_holds", tb[:min(len(tb), 56)] + "_orders", tb[:min(len(tb), 57)] + "_moves"} {
				_, _ = db.Exec("DROP TABLE IF EXISTS " + q + d + q)
			}
		}
	})
}
