package sqlstore_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestInTx: the Store bound to a caller's transaction writes the stock,
// the ledger, a hold line and an order record through it; a rollback
// undoes all of them, a commit keeps all of them.
func TestInTx(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db)
		for _, commit := range []bool{false, true} {
			sku, id := testenv.Prefix(), "h:"+testenv.Prefix()
			require.NoError(t, s.Init(ctx, sku, 10))
			_, v, err := s.Read(ctx, sku)
			require.NoError(t, err)

			tx, err := db.BeginTxx(ctx, nil)
			require.NoError(t, err)
			in := s.InTx(tx)
			ok, err := in.CompareAndSet(ctx, sku, v, 7, driver.DirReduce, "buyer")
			require.NoError(t, err)
			require.True(t, ok)
			_, err = in.CreateOrder(ctx, id, []inventory.Line{{SKU: sku, Qty: 2}}, time.Hour, time.Minute)
			require.NoError(t, err)
			_, v2, _, _, err := in.ReadHolds(ctx, sku, 10)
			require.NoError(t, err)
			ok, err = in.Hold(ctx, sku, v2, 5, id, 2, time.Now().Add(time.Hour))
			require.NoError(t, err)
			require.True(t, ok)
			n, err := in.Get(ctx, sku)
			require.NoError(t, err)
			require.EqualValues(t, 5, n, "the transaction sees its writes")
			if commit {
				require.NoError(t, tx.Commit())
			} else {
				require.NoError(t, tx.Rollback())
			}

			n, err = s.Get(ctx, sku)
			require.NoError(t, err)
			held, err := s.Held(ctx, sku)
			require.NoError(t, err)
			rem, seen, err := s.Seen(ctx, sku, driver.DirReduce, "buyer")
			require.NoError(t, err)
			_, oerr := s.Order(ctx, id)
			if commit {
				require.Equal(t, [3]int64{5, 2, 7}, [3]int64{n, held, rem}, "stock, held, remaining of the key")
				require.True(t, seen)
				require.NoError(t, oerr)
			} else {
				require.Equal(t, [2]int64{10, 0}, [2]int64{n, held}, "stock and held untouched")
				require.False(t, seen, "ledger untouched")
				require.ErrorIs(t, oerr, inventory.ErrNotFound, "no order record")
			}
		}
	})
}
