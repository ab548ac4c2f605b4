package optimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/integration/internal/sqlfault"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

// bothModes runs the version compare-and-set and the single statement on
// the same rows, call by call in turn.
func bothModes(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) *sqlfault.Alternate {
	return &sqlfault.Alternate{Managers: []inventory.StockManager{
		newManager(t, db, schema), newManager(t, db, schema, optimistic.WithSingleStatement()),
	}}
}

// TestBackendsKilledMidSale kills the test's own server connections, again
// and again, in the middle of a sale: MariaDB KILL CONNECTION, PostgreSQL
// pg_terminate_backend.
func TestBackendsKilledMidSale(t *testing.T) {
	for _, srv := range sqlfault.Servers {
		t.Run(srv.Name, func(t *testing.T) {
			p := srv.Open(t, "")
			schema := sqltest.Schema(t, p.Admin)
			killed, kill := sqlfault.KillFor(t, p, time.Second, 20*time.Millisecond)
			sale := faulttest.Sale{Manager: bothModes(t, p.DB, schema), SKU: testenv.Prefix(), Stock: 150, Buyers: 400, Refund: 7}
			res := sale.Run(t, kill, func() {})
			t.Logf("%d connections killed", killed.Load())
			require.Positive(t, killed.Load())
			require.Positive(t, res.Failed, "the kills should have failed some calls")
		})
	}
}

// TestNetworkFaults runs a sale through toxiproxy under each fault, with
// stock to spare: a refusal would be a lie about the stock. As many buyers
// run at once as the pool has connections, so the fault finds each of them
// at some step of its transaction.
func TestNetworkFaults(t *testing.T) {
	for _, srv := range sqlfault.Servers {
		t.Run(srv.Name, func(t *testing.T) {
			px := netfault.NewProxy(t, srv.Addr(t))
			p := srv.Open(t, px.Addr())
			schema := sqltest.Schema(t, p.Admin)
			m := sqlfault.Checked{StockManager: bothModes(t, p.DB, schema), T: t, Pkg: "optimistic"}
			var unknown int
			for _, tc := range sqlfault.NetworkFaults {
				t.Run(tc.Name, func(t *testing.T) {
					sale := faulttest.Sale{Manager: m, SKU: testenv.Prefix(), Stock: 120, Buyers: 120, Refund: 5,
						Workers: sqltest.Conns, CallTimeout: sqlfault.CallTimeout}
					res := sale.Run(t, func() {
						tc.Fault(px)
						time.Sleep(tc.For)
						px.Clear()
					}, px.Reconnect)
					require.Positive(t, res.Failed, "the fault should have failed some calls")
					require.Zero(t, res.Insufficient, "no call may be refused: there was stock for all")
					unknown += res.FailedApplied
				})
			}
			t.Logf("%d failed calls had taken effect, found by their keys", unknown)
		})
	}
}

// TestErrorsUnderFaultAreWrapped: while the network is down a call ends with
// its context, with an error that claims nothing about the stock.
func TestErrorsUnderFaultAreWrapped(t *testing.T) {
	for _, srv := range sqlfault.Servers {
		t.Run(srv.Name, func(t *testing.T) {
			px := netfault.NewProxy(t, srv.Addr(t))
			p := srv.Open(t, px.Addr())
			schema := sqltest.Schema(t, p.Admin)
			ctx := context.Background()
			sku := testenv.Prefix()
			for _, m := range bothModes(t, p.DB, schema).Managers {
				require.NoError(t, m.Init(ctx, sku, 5))
				px.Blackhole()
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := m.Reduce(cctx, sku, 1, inventory.WithKey("k"))
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded)
				for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate} {
					require.False(t, errors.Is(err, s), "%v", err)
				}
				px.Clear()
				px.Reconnect()
				n, err := m.Get(ctx, sku)
				require.NoError(t, err)
				require.EqualValues(t, 5, n, "a blackholed call before any write changes nothing")
			}
		})
	}
}

// TestLateCommit: a keyed call fails with its context while the server
// commits it; the retry with its key finds it done. PostgreSQL only, whose
// triggers can be deferred to COMMIT; internal/sqldialect's TestCommitLost
// loses a COMMIT's answer on MariaDB too.
func TestLateCommit(t *testing.T) {
	db := testenv.Postgres(t)
	schema := sqltest.Schema(t, db)
	sqlfault.LateCommit(t, db, schema, bothModes(t, db, schema).Managers...)
}

// TestStalledServer: while the server hangs, every call returns within its
// deadline plus inventory.DeadlineSlack, in both modes, and the calls that
// failed are applied at most once, as their keyed retries show.
func TestStalledServer(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []optimistic.Option
	}{{"combining", nil}, {"single", []optimistic.Option{optimistic.WithSingleStatement()}}} {
		t.Run(mode.name, func(t *testing.T) {
			sqlfault.Stall(t, "optimistic", func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager {
				return newManager(t, db, schema, mode.opts...)
			})
		})
	}
}
