package sqldialect_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/integration/internal/sqlfault"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestCommitLost loses the answer to a COMMIT: the transaction must end
// with its context (go-sql-driver/mysql's Commit alone would wait for the
// dead connection forever) and, since the server got the COMMIT, its write
// is there afterwards: the outcome the client could not know.
func TestCommitLost(t *testing.T) {
	for _, srv := range sqlfault.Servers {
		t.Run(srv.Name, func(t *testing.T) {
			px := netfault.NewProxy(t, srv.Addr(t))
			p := srv.Open(t, px.Addr())
			tb, err := sqldialect.New(p.DB, sqldialect.Config{Pkg: "test",
				Schema: sqldialect.Schema(sqltest.Schema(t, p.Admin)), KeyTTL: time.Minute})
			require.NoError(t, err)
			bg := context.Background()
			sku := testenv.Prefix()
			require.NoError(t, tb.Init(bg, sku, 5))

			ctx, cancel := context.WithTimeout(bg, time.Second) // time enough to reach the COMMIT
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- tb.Tx(ctx, func(tx *sqlx.Tx) error {
					_, _, err := tb.Lock(ctx, tx, sku)
					if err == nil {
						_, err = tb.Set(ctx, tx, sku, 1, 4)
					}
					px.Blackhole() // the COMMIT gets through; its answer does not
					return err
				})
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(30 * time.Second):
				px.Clear()
				t.Fatalf("the COMMIT ignored its context: %v", <-done)
			}
			px.Clear()
			px.Reconnect()
			n, err := tb.Get(bg, sku)
			require.NoError(t, err)
			require.EqualValues(t, 4, n, "the server committed")
		})
	}
}
