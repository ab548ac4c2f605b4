package sqltest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
)

// Tables returns a [sqlengine.Tables] on db with cfg, whose zero fields
// take the tests' defaults: Pkg "test", a key TTL of one hour and, for the
// zero Schema, tables unique to t ([Schema]).
func Tables(t testing.TB, db *sqlx.DB, cfg sqlengine.Config) *sqlengine.Tables {
	t.Helper()
	if cfg.Pkg == "" {
		cfg.Pkg = "test"
	}
	if cfg.KeyTTL == 0 {
		cfg.KeyTTL = time.Hour
	}
	if cfg.Schema == (sqldialect.Schema{}) {
		cfg.Schema = sqldialect.Schema(Schema(t, db))
	}
	tb, err := sqlengine.New(db, cfg)
	require.NoError(t, err)
	return tb
}

// Deadlock makes two transactions of db lock the rows of a and b through
// tb, then each the other's row at once: the server must break the
// deadlock. A transaction whose second lock fails rolls back, which lets
// the other through. It returns the errors of the two second locks, the
// one of the transaction that locked a first first.
func Deadlock(t *testing.T, ctx context.Context, db *sqlx.DB, tb *sqlengine.Tables, a, b string) [2]error {
	t.Helper()
	var txs [2]*sqlx.Tx
	for i, sku := range []string{a, b} {
		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		_, err = tb.LockHolds(ctx, tx, sku)
		require.NoError(t, err)
		txs[i] = tx
	}
	var errs [2]error
	var wg sync.WaitGroup
	for i, sku := range []string{b, a} {
		wg.Go(func() {
			if _, errs[i] = tb.LockHolds(ctx, txs[i], sku); errs[i] != nil {
				_ = txs[i].Rollback() // let the other one through
			}
		})
	}
	wg.Wait()
	return errs
}
