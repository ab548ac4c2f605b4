package sqlfault

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// Managers returns the Managers of a SQL strategy under test, over schema
// in db: one per mode it has. A sale alternates between them on the same
// rows ([Alternate]); a test of one call at a time runs each in turn.
type Managers func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) []inventory.StockManager

// Suite runs, as subtests of t, the fault tests every SQL strategy (package
// pkg, its error prefix) shares:
//
//   - BackendsKilledMidSale: the test's own server connections are killed,
//     again and again, in the middle of a sale (MariaDB KILL CONNECTION,
//     PostgreSQL pg_terminate_backend).
//   - NetworkFaults: a sale through toxiproxy under each of [NetworkFaults],
//     with stock to spare, so that a refusal would be a lie about the stock;
//     as many buyers run at once as the pool has connections.
//   - ErrorsUnderFaultAreWrapped: while the network is down a call ends with
//     its context, with an error that claims nothing about the stock, and
//     changes nothing.
//   - LateCommit: see [LateCommit] (PostgreSQL).
//
// The stall test is [Stall].
func Suite(t *testing.T, pkg string, managers Managers) {
	t.Run("BackendsKilledMidSale", func(t *testing.T) {
		for _, srv := range Servers {
			t.Run(srv.Name, func(t *testing.T) {
				p := srv.Open(t, "")
				killed, kill := KillFor(t, p, time.Second, 20*time.Millisecond)
				m := &Alternate{Managers: managers(t, p.DB, sqltest.Schema(t, p.Admin))}
				sale := faulttest.Sale{Manager: m, SKU: testenv.Prefix(), Stock: 150, Buyers: 400, Refund: 7}
				res := sale.Run(t, kill, func() {})
				t.Logf("%d connections killed", killed.Load())
				require.Positive(t, killed.Load())
				require.Positive(t, res.Failed, "the kills should have failed some calls")
			})
		}
	})
	t.Run("NetworkFaults", func(t *testing.T) {
		for _, srv := range Servers {
			t.Run(srv.Name, func(t *testing.T) {
				px := netfault.NewProxy(t, srv.Addr(t))
				p := srv.Open(t, px.Addr())
				m := Checked{StockManager: &Alternate{Managers: managers(t, p.DB, sqltest.Schema(t, p.Admin))}, T: t, Pkg: pkg}
				var unknown int
				for _, tc := range NetworkFaults {
					t.Run(tc.Name, func(t *testing.T) {
						sale := faulttest.Sale{Manager: m, SKU: testenv.Prefix(), Stock: 120, Buyers: 120, Refund: 5,
							Workers: sqltest.Conns, CallTimeout: CallTimeout}
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
	})
	t.Run("ErrorsUnderFaultAreWrapped", func(t *testing.T) {
		for _, srv := range Servers {
			t.Run(srv.Name, func(t *testing.T) {
				px := netfault.NewProxy(t, srv.Addr(t))
				p := srv.Open(t, px.Addr())
				ctx := context.Background()
				sku := testenv.Prefix()
				for _, m := range managers(t, p.DB, sqltest.Schema(t, p.Admin)) {
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
	})
	t.Run("LateCommit", func(t *testing.T) {
		shield := NewCancelShield(t, pgAddr(t))
		p := openPostgres(t, shield.Addr())
		schema := sqltest.Schema(t, p.Admin)
		LateCommit(t, p.Admin, schema, shield, managers(t, p.DB, schema)...)
	})
}
