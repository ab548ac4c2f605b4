package rowlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/refusals/refusalstest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

func newManager(t testing.TB, db *sqlx.DB, schema sqlstore.Schema, opts ...rowlock.Option) *rowlock.Manager {
	t.Helper()
	m, err := rowlock.New(db, append([]rowlock.Option{rowlock.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	return m
}

func TestConformance(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		inventorytest.Run(t, inventorytest.Config{
			RequireOrders: true,
			Timeout:       5 * time.Minute, // the carts on a loaded 2-core machine under -race: SQLite needs more than 2m
			NewManager:    func(t *testing.T) inventory.StockManager { return newManager(t, db, sqltest.Harness(t, db, schema)) },
		})
	})
}

func quote(db *sqlx.DB, id string) string {
	if db.DriverName() == "mysql" {
		return "`" + id + "`"
	}
	return `"` + id + `"`
}

// holdLock locks the row of sku from another transaction until the end of t
// or until the returned func is called.
func holdLock(t *testing.T, db *sqlx.DB, schema sqlstore.Schema, sku string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	q := "SELECT stock FROM " + quote(db, schema.Table) + " WHERE sku = ? FOR UPDATE"
	if db.DriverName() == "sqlite" {
		q = "UPDATE " + quote(db, schema.Table) + " SET version = version WHERE sku = ? RETURNING stock"
	}
	var n int64
	require.NoError(t, tx.QueryRowxContext(ctx, tx.Rebind(q), sku).Scan(&n))
	release = func() { _ = tx.Rollback() }
	t.Cleanup(release)
	return release
}

// TestLockTimeout holds the row lock in another transaction: the call gives
// up with ErrContention within twice the lock timeout (rounded up to whole
// seconds on MariaDB, whose FOR UPDATE WAIT n counts seconds), or with ctx's
// error when ctx ends first, and changes nothing. The server's own
// timeout is never waited for: on MariaDB innodb_lock_wait_timeout is 50 s.
func TestLockTimeout(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		schema := sqltest.Schema(t, db)
		wait, bound := 200*time.Millisecond, 200*time.Millisecond
		if db.DriverName() == "mysql" {
			wait, bound = 1200*time.Millisecond, 2*time.Second // rounded up to 2 s
		}
		m := newManager(t, db, schema, rowlock.WithLockTimeout(wait))
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))

		release := holdLock(t, db, schema, sku)
		for _, key := range []string{"", "k"} {
			// Long enough for a loaded machine, far short of the server's own.
			cctx, cancel := context.WithTimeout(ctx, 5*bound)
			start := time.Now()
			_, err := m.Reduce(cctx, sku, 1, inventory.WithKey(key+"x"))
			took := time.Since(start)
			cancel()
			require.ErrorIs(t, err, inventory.ErrContention, "no ErrContention within 5 x %v", bound)
			// 2 x bound is the backstop; the margin is this machine's noise.
			require.Less(t, took, 2*bound+300*time.Millisecond, "gave up too late for a %v lock timeout", wait)
			t.Logf("lock timeout %v: gave up after %v: %v", wait, took.Round(time.Millisecond), err)
		}

		patient := newManager(t, db, schema, rowlock.WithLockTimeout(time.Hour))
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := patient.Reduce(short, sku, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded, "ctx bounds the wait")
		release()

		n, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 10, n, "nothing changed")
		// patient: under load the lock the ended calls left can outlast
		// m's 200 ms (SQLite: a fresh clone beside another, load 11).
		rem, err := patient.Reduce(ctx, sku, 1, inventory.WithKey("kx"))
		require.NoError(t, err, "the key of the call that gave up is unused")
		require.EqualValues(t, 9, rem)
	})
}

func TestCustomSchema(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		p := testenv.Prefix()
		products, ledger := "products_"+p, "keys_"+p
		idType := map[string]string{"mysql": "VARBINARY(64)", "pgx": `VARCHAR(64) COLLATE "C"`, "sqlite": "TEXT"}[db.DriverName()]
		_, err := db.ExecContext(ctx, "CREATE TABLE "+quote(db, products)+" (id "+idType+" PRIMARY KEY, qty BIGINT NOT NULL, rev BIGINT NOT NULL)")
		require.NoError(t, err)
		sqltest.Drop(t, db, products, ledger)
		schema := sqlstore.Schema{Table: products, SKU: "id", Stock: "qty", Version: "rev", Ledger: ledger}
		store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
		require.NoError(t, err)
		require.NoError(t, store.CreateTables(ctx))

		m := newManager(t, db, schema)
		require.NoError(t, m.Init(ctx, p, 5))
		rem, err := m.Reduce(ctx, p, 2, inventory.WithKey("k"))
		require.NoError(t, err)
		require.EqualValues(t, 3, rem)
		rem, err = m.Reduce(ctx, p, 2, inventory.WithKey("k"))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.EqualValues(t, 3, rem)
		rem, err = m.Return(ctx, p, 1)
		require.NoError(t, err)
		require.EqualValues(t, 4, rem)
		_, v, err := store.Read(ctx, p)
		require.NoError(t, err)
		require.EqualValues(t, 3, v, "Init and two writes each moved the version")
	})
}

// TestKeyExpiry: an expired key counts as absent and can be used again.
func TestKeyExpiry(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		sqltest.KeyExpiry(t, func(ttl time.Duration) inventory.StockManager {
			return newManager(t, db, schema, rowlock.WithKeyTTL(ttl))
		})
	})
}

// TestRefusals checks WithRefusals on every engine (refusalstest.Run):
// stale refusals for at most the TTL, a Manager's own Return and Init end
// them, keyed calls always reach the database, and nothing is sold that
// the database did not sell.
func TestRefusals(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		const ttl = 300 * time.Millisecond
		refusalstest.Run(t, newManager(t, db, schema, rowlock.WithRefusals(ttl)), newManager(t, db, schema), testenv.Prefix(), ttl)
	})
}
