package luascript_test

import (
	"context"
	"errors"
	"regexp"

	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
)

// TestLedgerRedisKilled runs inventorytest.RunLedgerFaults on a private
// redis-server with appendonly yes and appendfsync always, SIGKILLed
// mid-sale and restarted from its append-only file, with calls merged
// (the default) and one at a time: every move a call was told of has its
// entry, no entry lacks its move, keyed retries are recorded once, and
// each SKU replays to its stock.
func TestLedgerRedisKilled(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []luascript.Option
	}{{"merged", nil}, {"alone", []luascript.Option{luascript.WithMaxBatch(1)}}} {
		t.Run(mode.name, func(t *testing.T) {
			srv := faulttest.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
			inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
				NewManager: func(t *testing.T) inventory.StockManager {
					m, err := luascript.New(itest.FaultClient(t, srv.Addr(), time.Second),
						append([]luascript.Option{luascript.WithLedger(0)}, mode.opts...)...)
					require.NoError(t, err)
					return m
				},
				Kill:    srv.Kill,
				Restart: srv.Start,
			})
		})
	}
}

// TestLedgerRedisRestoredFromSnapshot is what the ledger promises when
// Redis loses acknowledged writes: a private redis-server without an
// append-only file is saved (SAVE) mid-sale, sells on for a moment, and is
// SIGKILLed, so that it comes back from the older snapshot, without the
// moves acknowledged after it. They are lost with their entries: no entry
// lacks its move, and each SKU's ledger still replays to its stock.
func TestLedgerRedisRestoredFromSnapshot(t *testing.T) {
	srv := faulttest.StartRedis(t, "--appendonly", "no")
	admin := itest.FaultClient(t, srv.Addr(), 10*time.Second)
	res := inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
		NewManager: func(t *testing.T) inventory.StockManager {
			m, err := luascript.New(itest.FaultClient(t, srv.Addr(), time.Second), luascript.WithLedger(0))
			require.NoError(t, err)
			return m
		},
		Kill: func() {
			ctx := context.Background()
			assert.NoError(t, admin.Save(ctx).Err())
			// Kill once the sale wrote on past the snapshot: moves
			// acknowledged, then lost.
			assert.NoError(t, faulttest.Eventually(itest.CtxFor(t, time.Minute), func() error {
				info, err := admin.Info(ctx, "persistence").Result()
				if err == nil && !regexp.MustCompile(`rdb_changes_since_last_save:[1-9]\d{2}`).MatchString(info) {
					err = errors.New("fewer than 100 writes since the snapshot")
				}
				return err
			}))
			srv.Kill()
		},
		Restart: srv.Start,
		Lossy:   true,
	})
	require.Positive(t, res.Lost, "the restore from the snapshot should have lost acknowledged moves")
}
