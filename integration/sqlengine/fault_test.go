package sqlengine_test

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
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestCommitLost loses the answer to a COMMIT: the transaction must end
// with its context (go-sql-driver/mysql's Commit alone would wait for the
// dead connection forever) and, since the server got the COMMIT, its write
// is there afterwards: the outcome the client could not know. The context
// is cancelled once the write shows on another connection, straight to the
// server: the COMMIT got there, however slow the machine.
func TestCommitLost(t *testing.T) {
	for _, srv := range sqlfault.Servers {
		t.Run(srv.Name, func(t *testing.T) {
			px := netfault.NewProxy(t, srv.Addr(t))
			p := srv.Open(t, px.Addr())
			cfg := sqlengine.Config{Pkg: "test", Schema: sqldialect.Schema(sqltest.Schema(t, p.Admin)), KeyTTL: time.Minute}
			tb, err := sqlengine.New(p.DB, cfg)
			require.NoError(t, err)
			direct, err := sqlengine.New(p.Admin, cfg)
			require.NoError(t, err)
			bg, stop := context.WithTimeout(context.Background(), 5*time.Minute) // a bound for a broken run only
			defer stop()
			sku := testenv.Prefix()
			require.NoError(t, tb.Init(bg, sku, 5))

			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- tb.Tx(ctx, func(tx *sqlx.Tx) error {
					_, err := tb.LockHolds(ctx, tx, sku)
					if err == nil {
						_, err = tb.Set(ctx, tx, sku, 1, 4)
					}
					px.Blackhole() // the COMMIT gets through; its answer does not
					return err
				})
			}()
			for {
				n, err := direct.Get(bg, sku)
				require.NoError(t, err)
				if n == 4 {
					break // committed
				}
				select {
				case err := <-done:
					px.Clear()
					t.Fatalf("the transaction ended before its COMMIT reached the server: %v", err)
				case <-time.After(10 * time.Millisecond):
				}
			}
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
			case <-time.After(time.Minute): // a bound for a broken run only
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
