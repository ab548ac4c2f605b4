package sqltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
)

// Manager is a strategy that takes orders.
type Manager interface {
	inventory.StockManager
	inventory.OrderManager
}

// InTx tests a strategy's calls inside a caller's transaction: m is the
// strategy on db, inTx binds its calls to a transaction. A rollback undoes
// the stock moves, their idempotency keys and the holds; a commit keeps
// them all; a refused call leaves the caller's transaction usable.
func InTx(t *testing.T, db *sqlx.DB, m Manager, inTx func(*sqlx.Tx) Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begin := func(t *testing.T) (*sqlx.Tx, Manager) {
		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		return tx, inTx(tx)
	}

	t.Run("Rollback", func(t *testing.T) {
		a, b := testenv.Prefix(), testenv.Prefix()
		cart, order := testenv.Prefix(), testenv.Prefix() // keys and hold ids are not per SKU
		require.NoError(t, m.Init(ctx, a, 10))
		require.NoError(t, m.Init(ctx, b, 10))
		tx, in := begin(t)
		rem, err := in.Reduce(ctx, a, 3, inventory.WithKey("buyer"))
		require.NoError(t, err)
		require.EqualValues(t, 7, rem)
		require.NoError(t, in.ReduceLines(ctx, []inventory.Line{{SKU: a, Qty: 1}, {SKU: b, Qty: 2}}, inventory.WithKey(cart)))
		require.NoError(t, in.Reserve(ctx, order, []inventory.Line{{SKU: b, Qty: 4}}, time.Hour))
		n, err := in.Get(ctx, a)
		require.NoError(t, err)
		require.EqualValues(t, 6, n, "the transaction sees its own moves")
		held, err := in.Held(ctx, b)
		require.NoError(t, err)
		require.EqualValues(t, 4, held)
		require.NoError(t, tx.Rollback())

		for sku, want := range map[string]int64{a: 10, b: 10} {
			n, err := m.Get(ctx, sku)
			require.NoError(t, err)
			require.Equal(t, want, n, "stock untouched")
			held, err := m.Held(ctx, sku)
			require.NoError(t, err)
			require.Zero(t, held, "no hold")
		}
		require.ErrorIs(t, m.Confirm(ctx, order), inventory.ErrNotFound, "the hold was rolled back")
		// The keys were rolled back with the moves: the same calls take effect.
		rem, err = m.Reduce(ctx, a, 3, inventory.WithKey("buyer"))
		require.NoError(t, err, "ledger untouched")
		require.EqualValues(t, 7, rem)
		require.NoError(t, m.ReduceLines(ctx, []inventory.Line{{SKU: a, Qty: 1}, {SKU: b, Qty: 2}}, inventory.WithKey(cart)))
		require.NoError(t, m.Reserve(ctx, order, []inventory.Line{{SKU: b, Qty: 4}}, time.Hour))
		require.NoError(t, m.Cancel(ctx, order))
	})

	t.Run("Commit", func(t *testing.T) {
		a, b := testenv.Prefix(), testenv.Prefix()
		cart, order := testenv.Prefix(), testenv.Prefix() // keys and hold ids are not per SKU
		require.NoError(t, m.Init(ctx, a, 10))
		require.NoError(t, m.Init(ctx, b, 10))
		tx, in := begin(t)
		_, err := in.Reduce(ctx, a, 3, inventory.WithKey("buyer"))
		require.NoError(t, err)
		require.NoError(t, in.ReduceLines(ctx, []inventory.Line{{SKU: a, Qty: 1}, {SKU: b, Qty: 2}}, inventory.WithKey(cart)))
		require.NoError(t, in.Reserve(ctx, order, []inventory.Line{{SKU: b, Qty: 4}}, time.Hour))
		require.NoError(t, tx.Commit())

		for sku, want := range map[string][2]int64{a: {6, 0}, b: {4, 4}} {
			n, err := m.Get(ctx, sku)
			require.NoError(t, err)
			held, err2 := m.Held(ctx, sku)
			require.NoError(t, errors.Join(err, err2))
			require.Equal(t, want, [2]int64{n, held}, "stock and held")
		}
		rem, err := m.Reduce(ctx, a, 3, inventory.WithKey("buyer"))
		require.ErrorIs(t, err, inventory.ErrDuplicate, "the key was committed with the move")
		require.EqualValues(t, 7, rem, "with the first call's remaining")
		err = m.ReduceLines(ctx, []inventory.Line{{SKU: a, Qty: 1}, {SKU: b, Qty: 2}}, inventory.WithKey(cart))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.NoError(t, m.Confirm(ctx, order))
		require.ErrorIs(t, m.Reserve(ctx, order, []inventory.Line{{SKU: b, Qty: 1}}, time.Hour), inventory.ErrDuplicate)
	})

	t.Run("RefusalKeepsTx", func(t *testing.T) {
		a := testenv.Prefix()
		require.NoError(t, m.Init(ctx, a, 2))
		tx, in := begin(t)
		_, err := in.Reduce(ctx, a, 3)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
		err = in.Reserve(ctx, "big", []inventory.Line{{SKU: a, Qty: 3}}, time.Hour)
		var short *inventory.InsufficientError
		require.ErrorAs(t, err, &short)
		require.ErrorIs(t, in.Confirm(ctx, "nothing"), inventory.ErrNotFound)
		_, err = in.Return(ctx, a, inventory.MaxStock)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
		rem, err := in.Reduce(ctx, a, 2)
		require.NoError(t, err, "the transaction goes on after the refusals")
		require.Zero(t, rem)
		require.NoError(t, tx.Commit())
		n, err := m.Get(ctx, a)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("ExpiredInTx", func(t *testing.T) {
		a, short := testenv.Prefix(), testenv.Prefix()
		require.NoError(t, m.Init(ctx, a, 5))
		require.NoError(t, m.Reserve(ctx, short, []inventory.Line{{SKU: a, Qty: 5}}, time.Millisecond))
		time.Sleep(20 * time.Millisecond)
		tx, in := begin(t)
		rem, err := in.Reduce(ctx, a, 1)
		require.NoError(t, err, "the expired hold is released inside the caller's transaction")
		require.EqualValues(t, 4, rem)
		require.NoError(t, tx.Commit())
		held, err := m.Held(ctx, a)
		require.NoError(t, err)
		require.Zero(t, held)
		require.ErrorIs(t, m.Confirm(ctx, short), inventory.ErrHoldReleased)
	})
}

// KeyExpiry checks that an idempotency key lasts its TTL and no longer:
// newManager builds the Manager with a key TTL of ttl. The check that a
// repeat is a duplicate needs the key still live: on a machine too loaded
// to make it within the TTL (by the client's clock since before the call
// that wrote the key), it runs again with a longer TTL on a fresh SKU.
func KeyExpiry(t *testing.T, newManager func(keyTTL time.Duration) inventory.StockManager) {
	ctx := context.Background()
	testenv.TTLRounds(t, 200*time.Millisecond, 3200*time.Millisecond, func(ttl time.Duration) bool {
		m := newManager(ttl)
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))
		start := time.Now()
		_, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
		require.NoError(t, err)
		rem, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
		if !testenv.Live(t, start, ttl, "the repeat of the new key") {
			return false
		}
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.EqualValues(t, 9, rem)
		time.Sleep(ttl + 100*time.Millisecond)
		start = time.Now()
		rem, err = m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
		require.NoError(t, err, "the key expired")
		require.EqualValues(t, 8, rem)
		rem, err = m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
		if !testenv.Live(t, start, ttl, "the repeat of the renewed key") {
			return false
		}
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.EqualValues(t, 8, rem, "the renewed key holds the new result")
		return true
	})
}
