package rowlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/ledgerguard"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestKeyInMoveTransaction: a keyed call writes its key in the transaction
// that moves the stock, never through a statement of its own, which would
// commit the key even when the move rolls back (ledgerguard makes the
// database refuse such a write at once). Single calls (combined in a
// batch), a lines call and their duplicates, one at a time.
func TestKeyInMoveTransaction(t *testing.T) {
	check := func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, 30*time.Second)
		schema := sqltest.Schema(t, db)
		if db.DriverName() != "sqlite" {
			ledgerguard.Install(t, db, schema)
		}
		m := newManager(t, db, schema)
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
		require.ErrorIs(t, m.ReduceLines(ctx, []inventory.Line{{SKU: sku, Qty: 1}}, inventory.WithKey("l")), inventory.ErrDuplicate)
		n, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 8, n)
	}
	for _, e := range []string{"mariadb", "postgres"} {
		t.Run(e, func(t *testing.T) { check(t, sqltest.Open(t, e)) })
	}
	t.Run("sqlite", func(t *testing.T) { check(t, ledgerguard.SQLite(t)) })
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
