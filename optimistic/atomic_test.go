package optimistic_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/ledgerguard"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

// TestKeyInMoveTransaction: a keyed call writes its key in the transaction
// that moves the stock, never through a statement of its own, which would
// commit the key even when the move does not (ledgerguard makes the
// database refuse such a write at once), in both modes, one call at a time.
func TestKeyInMoveTransaction(t *testing.T) {
	check := func(t *testing.T, db *sqlx.DB, opts ...optimistic.Option) {
		ctx := bounded(t, 30*time.Second)
		schema := sqltest.Schema(t, db)
		if db.DriverName() != "sqlite" {
			ledgerguard.Install(t, db, schema)
		}
		m := newManager(t, db, schema, opts...)
		sku, other := testenv.Prefix(), testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))
		require.NoError(t, m.Init(ctx, other, 10))
		why := "the key must be written in the transaction that moves the stock"
		if db.DriverName() == "sqlite" {
			why += " (with a zero busy timeout, a write through another connection fails at once: database is locked)"
		}
		rem, err := m.Reduce(ctx, sku, 2, inventory.WithKey("r"))
		require.NoError(t, err, "keyed Reduce: %s", why)
		require.EqualValues(t, 8, rem)
		rem, err = m.Return(ctx, sku, 1, inventory.WithKey("r"))
		require.NoError(t, err, "keyed Return: %s", why)
		require.EqualValues(t, 9, rem)
		require.NoError(t, m.ReduceLines(ctx, []inventory.Line{{SKU: sku, Qty: 1}, {SKU: other, Qty: 1}}, inventory.WithKey("l")),
			"keyed ReduceLines: %s", why)
		rem, err = m.Reduce(ctx, sku, 2, inventory.WithKey("r"))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.EqualValues(t, 8, rem, "the duplicate reports the first call's remaining")
		n, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 8, n)
	}
	for _, mode := range []struct {
		name string
		opts []optimistic.Option
	}{{"cas", nil}, {"single", []optimistic.Option{optimistic.WithSingleStatement()}}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, e := range []string{"mariadb", "postgres"} {
				t.Run(e, func(t *testing.T) { check(t, sqltest.Open(t, e), mode.opts...) })
			}
			t.Run("sqlite", func(t *testing.T) { check(t, ledgerguard.SQLite(t), mode.opts...) })
		})
	}
}

// TestRetrySeesRival: on the read path, a rival that moves the row
// between a call's read and its write without changing the call's outcome
// (the version, and stock the call still fits in) does not make the write
// lose; a rival that takes the stock the call needed does, and with two
// attempts the call must then end refused with the rival's stock as its
// remaining, which it can only if its second read is a fresh statement
// that sees the rival's commit, not a re-read inside one REPEATABLE READ
// snapshot (which would plan the same write, lose again and end in
// ErrContention). It runs on the library's table and on one without its
// CHECK (stock >= 0), where a write that does not check the stock range
// shows as the oversell it is.
func TestRetrySeesRival(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		for _, sc := range schemas {
			t.Run(sc.name, func(t *testing.T) { retrySeesRival(t, db, sc.make(t, db)) })
		}
	})
}

func retrySeesRival(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) {
	ctx := bounded(t, time.Minute)
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	require.NoError(t, err)
	m := newManager(t, db, schema, optimistic.WithMaxAttempts(2))
	optimistic.SetReadFirst(m)
	var rivals int
	var leave int64 // the stock the rival leaves
	optimistic.SetBeforeCAS(m, func(sku string) {
		if rivals++; rivals > 1 {
			return
		}
		stock, version, err := store.Read(ctx, sku)
		if assert.NoError(t, err) {
			ok, err := store.CompareAndSet(ctx, sku, version, min(leave, stock), driver.DirReduce, "")
			assert.NoError(t, err)
			assert.True(t, ok, "the rival's write")
		}
	})
	sku := testenv.Prefix()
	for _, opts := range [][]inventory.Option{nil, {inventory.WithKey("k")}} {
		require.NoError(t, m.Init(ctx, sku, 10))
		a0, c0 := m.Counts()

		rivals, leave = 0, 8 // the call still fits
		rem, err := m.Reduce(ctx, sku, 2, opts...)
		require.NoError(t, err, "keyed %v", opts != nil)
		require.EqualValues(t, 6, rem)
		require.Equal(t, 1, rivals, "one attempt: the rival did not make it lose")

		rivals, leave = 0, 1 // the call no longer fits
		rem, err = m.Reduce(ctx, sku, 2, append(opts, inventory.WithKey("k2"))...)
		if err == nil {
			n, _ := m.Get(ctx, sku)
			t.Fatalf("oversold: a Reduce of 2 took effect on the 1 unit a rival left between its read and its write "+
				"(remaining %d, stock %d): its write did not check the stock range", rem, n)
		}
		require.ErrorIs(t, err, inventory.ErrInsufficientStock, "keyed %v: a Reduce of 2 on the 1 unit a rival left between its read "+
			"and its write must be refused: the retry must see the rival's stock, and a write must not take units that are not there", opts != nil)
		require.EqualValues(t, 1, rem)
		require.Equal(t, 1, rivals, "the retry read, refused, and wrote nothing")
		n, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		a, c := m.Counts()
		require.EqualValues(t, 2, a-a0, "two writes tried")
		require.EqualValues(t, 1, c-c0, "one lost")
	}
}

// bounded returns a context for t that ends after d. If it has ended by the
// time t ends, t fails too, saying that it hung: a call waited until the
// deadline for a lock or a connection it could not get (the first error
// such a call returns wraps context.DeadlineExceeded).
func bounded(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(func() {
		if ctx.Err() != nil {
			t.Errorf("%s hung: it did not finish within its %v deadline; a call waited for a lock or a connection it could not get", t.Name(), d)
		}
		cancel()
	})
	return ctx
}

// uncheckedSchema returns a schema whose stock table is one of the
// caller's own without the CHECK (stock >= 0) of the library's table, as a
// user's products table may be: the database then stores a negative stock,
// and nothing but the library's own conditions stands between a race and
// an oversell. Its tables are dropped at the end of t.
func uncheckedSchema(t *testing.T, db *sqlx.DB) sqlstore.Schema {
	t.Helper()
	ctx := bounded(t, 30*time.Second)
	p := testenv.Prefix()
	s := sqlstore.Schema{Table: "own_" + p, Ledger: "ledger_" + p, Holds: "holds_" + p, Orders: "orders_" + p}
	q, idType := `"`, map[string]string{"mysql": "VARBINARY(255)", "pgx": `TEXT COLLATE "C"`, "sqlite": "TEXT"}[db.DriverName()]
	if db.DriverName() == "mysql" {
		q = "`"
	}
	_, err := db.ExecContext(ctx, "CREATE TABLE "+q+s.Table+q+" (sku "+idType+" NOT NULL PRIMARY KEY, stock BIGINT NOT NULL, version BIGINT NOT NULL DEFAULT 0)")
	require.NoError(t, err)
	sqltest.Drop(t, db, s.Table, s.Ledger, s.Holds, s.Orders)
	st, err := sqlstore.New(db, sqlstore.WithSchema(s))
	require.NoError(t, err)
	require.NoError(t, st.CreateTables(ctx))
	return s
}

// schemas are the tables TestProcesses and TestRetrySeesRival sell from:
// the library's, whose CHECK refuses a negative stock, and one without it,
// where an oversell shows as one.
var schemas = []struct {
	name string
	make func(*testing.T, *sqlx.DB) sqlstore.Schema
}{
	{"library-table", func(t *testing.T, db *sqlx.DB) sqlstore.Schema { return sqltest.Schema(t, db) }},
	{"own-table-unchecked", uncheckedSchema},
}
