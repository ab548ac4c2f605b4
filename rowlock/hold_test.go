package rowlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/rowlock"
)

// TestHoldsRow: while a call holds the row, another transaction cannot lock
// it: FOR UPDATE NOWAIT fails at once (MariaDB, PostgreSQL); on SQLite a
// write waits until its context ends. After the call, the row is free.
func TestHoldsRow(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		schema := sqltest.Schema(t, db)
		m := newManager(t, db, schema)
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))

		q := "SELECT stock FROM " + quote(db, schema.Table) + " WHERE sku = ? FOR UPDATE NOWAIT"
		if db.DriverName() == "sqlite" {
			q = "UPDATE " + quote(db, schema.Table) + " SET version = version WHERE sku = ? RETURNING stock"
		}
		// tryLock reports whether another transaction could lock the row.
		tryLock := func() error {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			tx, err := db.BeginTxx(cctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			var n int64
			return tx.QueryRowxContext(cctx, tx.Rebind(q), sku).Scan(&n)
		}
		var held []error
		rowlock.SetAfterLock(m, func([]string) { held = append(held, tryLock()) })
		for _, opts := range [][]inventory.Option{nil, {inventory.WithKey("k")}} {
			_, err := m.Reduce(ctx, sku, 1, opts...)
			require.NoError(t, err)
		}
		require.Len(t, held, 2)
		for i, err := range held {
			require.Error(t, err, "call %d: another transaction locked the row the call held", i)
			t.Logf("while held: %v", err)
		}
		require.NoError(t, tryLock(), "the row is free after the call")
	})
}

// TestFlashSaleNoContention: buyers rush one SKU, all within the lock
// timeout; each waits its turn for the row, so every call either takes a
// unit or is refused for want of stock. None gives up with ErrContention.
func TestFlashSaleNoContention(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		m := newManager(t, db, sqltest.Schema(t, db), rowlock.WithLockTimeout(30*time.Second))
		sku := testenv.Prefix()
		const stock, buyers = 30, 48
		require.NoError(t, m.Init(ctx, sku, stock))
		var mu sync.Mutex
		var sold, refused int
		var wg sync.WaitGroup
		for i := range buyers {
			wg.Go(func() {
				_, err := m.Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprint("buyer-", i%(buyers-4)))) // a few resend
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					sold++
				case errors.Is(err, inventory.ErrInsufficientStock), errors.Is(err, inventory.ErrDuplicate):
					refused++
				default:
					assert.NoError(t, err, "buyer %d", i)
				}
			})
		}
		wg.Wait()
		require.Equal(t, stock, sold)
		require.Equal(t, buyers-stock, refused)
		n, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}
