package optimistic_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/optimistic"
)

// TestLedgerServerKilled runs inventorytest.RunLedgerFaults on a private
// MariaDB and a private PostgreSQL, each SIGKILLed mid-sale and restarted
// on its data directory (crash recovery), in both modes on one server:
// every move a call was told of has its entry, no entry lacks its move,
// keyed retries are recorded once, and each SKU replays to its stock.
func TestLedgerServerKilled(t *testing.T) {
	for _, eng := range []struct {
		name  string
		start func(testing.TB) *faulttest.SQLServer
	}{{"mariadb", faulttest.StartMariaDB}, {"postgres", faulttest.StartPostgres}} {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			srv := eng.start(t)
			db := srv.Open(t, 16)
			first, err := optimistic.New(db, optimistic.WithLedger())
			require.NoError(t, err)
			require.NoError(t, first.CreateTables(context.Background()))
			for _, mode := range []struct {
				name string
				opts []optimistic.Option
			}{{"combining", nil}, {"single", []optimistic.Option{optimistic.WithSingleStatement()}}} {
				t.Run(mode.name, func(t *testing.T) {
					inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
						NewManager: func(t *testing.T) inventory.StockManager {
							m, err := optimistic.New(db, append([]optimistic.Option{optimistic.WithLedger()}, mode.opts...)...)
							require.NoError(t, err)
							return m
						},
						Kill:    srv.Kill,
						Restart: srv.Start,
						Buyers:  300,
					})
				})
			}
		})
	}
}
