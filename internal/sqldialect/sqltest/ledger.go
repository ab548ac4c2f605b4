package sqltest

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
)

// LedgerManager is a SQL strategy's Manager that keeps a movement ledger.
type LedgerManager interface {
	inventory.StockManager
	ledger.Reader
}

// LedgerInTx checks that m's entries are written in the caller's
// transaction: the calls bound to a transaction (bind) that rolls back
// leave none, those of one that commits leave theirs, and a call refused
// inside it leaves none and the transaction usable.
func LedgerInTx(t *testing.T, db *sqlx.DB, m LedgerManager, bind func(tx *sqlx.Tx) inventory.StockManager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sku, fresh := testenv.Prefix()+"-a", testenv.Prefix()+"-b"
	require.NoError(t, m.Init(ctx, sku, 10))

	tx, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	_, err = bind(tx).Reduce(ctx, sku, 2, inventory.WithRef("rolled back"))
	require.NoError(t, err)
	require.NoError(t, bind(tx).Init(ctx, fresh, 5))
	require.NoError(t, tx.Rollback())
	kinds := func(sku string) []ledger.Kind {
		es, err := m.Entries(ctx, sku, 0, ledger.MaxPage)
		require.NoError(t, err)
		var ks []ledger.Kind
		for _, e := range es {
			ks = append(ks, e.Kind)
		}
		return ks
	}
	require.Equal(t, []ledger.Kind{ledger.Init}, kinds(sku), "a rolled-back transaction leaves no entry")
	require.Empty(t, kinds(fresh))

	tx, err = db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	in := bind(tx)
	_, err = in.Reduce(ctx, sku, 3, inventory.WithRef("committed"), inventory.WithKey("k"))
	require.NoError(t, err)
	_, err = in.Reduce(ctx, sku, 100, inventory.WithRef("refused"))
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = in.Return(ctx, sku, 1, inventory.WithRef("returned"))
	require.NoError(t, err, "the transaction is usable after a refusal")
	require.NoError(t, in.Init(ctx, fresh, 5))
	require.NoError(t, tx.Commit())
	require.Equal(t, []ledger.Kind{ledger.Init, ledger.Reduce, ledger.Return}, kinds(sku))
	require.Equal(t, []ledger.Kind{ledger.Init}, kinds(fresh))
	for _, s := range []string{sku, fresh} {
		_, err := ledger.Check(ctx, m, m, s)
		require.NoError(t, err)
	}
	es, err := m.Entries(ctx, sku, 0, ledger.MaxPage)
	require.NoError(t, err)
	require.Equal(t, "committed", es[1].Ref)
	require.Equal(t, "k", es[1].Key)
	require.Equal(t, "returned", es[2].Ref)
}
