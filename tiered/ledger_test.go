package tiered

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ledger"
)

// ledgerEnv returns an env whose tables include the movement ledger's.
func ledgerEnv(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := e.manager(t, WithLedger())
	require.NoError(t, m.CreateTables(ctx))
}

// TestLedger runs the suite's Ledger part on Redis and each SQL engine:
// the merged default, and small chunks (most calls meet a grant).
func TestLedger(t *testing.T) {
	rdb := testenv.Redis(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			ledgerEnv(t, e)
			t.Run("default", func(t *testing.T) {
				inventorytest.RunLedger(t, inventorytest.Config{
					NewManager:    func(t *testing.T) inventory.StockManager { return e.manager(t, WithLedger()) },
					RequireOrders: true,
				})
			})
			t.Run("chunk3", func(t *testing.T) {
				inventorytest.RunLedger(t, inventorytest.Config{
					NewManager: func(t *testing.T) inventory.StockManager {
						return e.manager(t, WithLedger(), WithChunk(3), WithLowWater(1), WithMaxAttempts(20))
					},
					RequireOrders: true,
				})
			})
		})
	}
}

// TestLedgerOff: a Manager without WithLedger keeps none (ErrNotKept), its
// journal entries carry no ledger field, and it neither creates nor
// touches the ledger's table: its moves, holds and syncs run on tables
// made without it, and none appears.
func TestLedgerOff(t *testing.T) {
	rdb := testenv.Redis(t)
	onEngines(t, rdb, func(ctx context.Context, t *testing.T, e *env) {
		m := e.manager(t, WithChunk(5), WithLowWater(1))
		require.NoError(t, m.CreateTables(ctx))
		sku := "off"
		require.NoError(t, m.Init(ctx, sku, 20))
		_, err := m.Reduce(ctx, sku, 2, inventory.WithKey("k"), inventory.WithRef("r"))
		require.NoError(t, err)
		_, err = m.Return(ctx, sku, 1, inventory.WithRef("r2"))
		require.NoError(t, err)
		require.NoError(t, m.ReduceLines(ctx, []inventory.Line{{SKU: sku, Qty: 1}}, inventory.WithKey("kl")))
		require.NoError(t, m.Reserve(ctx, "h1", []inventory.Line{{SKU: sku, Qty: 2}}, time.Minute))
		require.NoError(t, m.Confirm(ctx, "h1"))
		require.NoError(t, m.Reserve(ctx, "h2", []inventory.Line{{SKU: sku, Qty: 1}}, time.Minute))
		require.NoError(t, m.Cancel(ctx, "h2"))

		msgs, err := rdb.XRange(ctx, m.journalKey(sku), "-", "+").Result()
		require.NoError(t, err)
		require.NotEmpty(t, msgs)
		for _, msg := range msgs {
			assert.NotContains(t, msg.Values, "l", "journal entry %s carries a ledger field", msg.ID)
		}
		require.NoError(t, m.Drain(ctx))
		_, err = m.Entries(ctx, sku, 0, 10)
		require.ErrorIs(t, err, ledger.ErrNotKept)
		var n int
		err = m.db.QueryRowxContext(ctx, "SELECT COUNT(*) FROM "+e.tables+"moves").Scan(&n)
		require.Error(t, err, "the ledger's table exists without WithLedger")
	})
}

// TestLedgerJournal: on the Redis path the ledger records ride in the
// journal entry the move appends anyway (no other stream), and the rows
// survive the journal's deletion once synced.
func TestLedgerJournal(t *testing.T) {
	rdb := testenv.Redis(t)
	e := newEnv(t, rdb, testenv.SQLite(t))
	ledgerEnv(t, e)
	ctx := ctxT(t, time.Minute)
	m := e.manager(t, WithLedger())
	sku := "j"
	require.NoError(t, m.Init(ctx, sku, 10))
	_, err := m.Reduce(ctx, sku, 3, inventory.WithKey("k1"), inventory.WithRef("order 1"))
	require.NoError(t, err)
	msgs, err := rdb.XRange(ctx, m.journalKey(sku), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, "reduce 3\nk1\norder 1\n", msgs[0].Values["l"])
	keys, err := rdb.Keys(ctx, e.prefix+"*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		typ, err := rdb.Type(ctx, k).Result()
		require.NoError(t, err)
		if typ == "stream" {
			assert.Equal(t, m.journalKey(sku), k, "a stream beside the journal")
		}
	}
	require.NoError(t, m.Drain(ctx))
	n, err := rdb.XLen(ctx, m.journalKey(sku)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "synced entries leave the journal")
	es, err := m.Entries(ctx, sku, 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 2)
	assert.Equal(t, ledger.Stock{Available: 7, Sold: 3}, es[1].After)
	ms, _, _ := strings.Cut(msgs[0].ID, "-")
	assert.Equal(t, ms, strconv.FormatInt(es[1].Time.UnixMilli(), 10), "the time is the journal entry's")
	_, err = ledger.Check(ctx, m, m, sku)
	require.NoError(t, err)
}
