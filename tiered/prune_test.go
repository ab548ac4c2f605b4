package tiered

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/testenv"
)

// TestLedgerPruned sells with pruning off, then on: the ledger holds a row
// per move without it and about the journal's lag with it. Then a Redis
// restored from an older state sends an entry whose ledger row was pruned:
// it is recognised by the prune mark, acknowledged, not applied again, and
// Reconcile's lookup counts it as synced.
func TestLedgerPruned(t *testing.T) {
	rdb := testenv.Redis(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			ctx := ctxT(t, time.Minute)
			const sku, initial, calls = "a", 1000, 200
			keep := e.manager(t, WithChunk(100))
			keep.ledger.off = true
			require.NoError(t, keep.Init(ctx, sku, initial))
			for range calls {
				_, err := keep.Reduce(ctx, sku, 1)
				require.NoError(t, err)
			}
			first, err := rdb.XRangeN(ctx, keep.journalKey(sku), "-", "+", 1).Result()
			require.NoError(t, err)
			require.Len(t, first, 1)
			old := first[0]
			require.NoError(t, keep.Drain(ctx))
			rows, bytes := ledgerSize(t, keep, sku)
			assert.EqualValues(t, calls, rows, "a ledger row per move")

			m := e.manager(t, WithChunk(100))
			for range calls {
				_, err := m.Reduce(ctx, sku, 1)
				require.NoError(t, err)
			}
			require.NoError(t, m.Drain(ctx))
			after, afterBytes := ledgerSize(t, m, sku)
			var mark int64
			require.NoError(t, m.db.GetContext(ctx, &mark, "SELECT pruned_ms FROM "+e.tables+"stock WHERE sku = "+placeholder(m, 1), sku))
			t.Logf("%s: ledger without pruning: %d rows after %d calls (%.2f rows, %.1f bytes of keys per call); with pruning: %d rows (%d bytes) after %d more calls (%.3f rows per call), %d pruned",
				eng.name, rows, calls, float64(rows)/calls, float64(bytes)/calls, after, afterBytes, calls, float64(after)/(2*calls), m.ledger.pruned.Load())
			assert.Less(t, after, int64(calls/4), "pruned down to the entries of the last milliseconds")
			assert.EqualValues(t, 2*calls-after, m.ledger.pruned.Load())
			oldMS, err := entryMS(old.ID)
			require.NoError(t, err)
			assert.Greater(t, mark, oldMS)

			// A Redis restored from an older state: the journal holds the
			// first entry again, applied and pruned long ago.
			stream := m.journalKey(sku)
			require.NoError(t, rdb.Del(ctx, stream).Err())
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: old.ID, Values: old.Values}).Err())
			require.NoError(t, rdb.XGroupCreate(ctx, stream, group, "0").Err())
			var seen int
			require.NoError(t, m.db.GetContext(ctx, &seen, m.q.seenEntry, sku, old.ID), "Reconcile's lookup finds it below the mark")
			err = m.db.GetContext(ctx, &seen, m.q.seenEntry, sku, fmt.Sprintf("%d-0", mark+1))
			assert.ErrorIs(t, err, sql.ErrNoRows, "an entry above the mark, never applied")
			n, err := m.Sync(ctx)
			require.NoError(t, err)
			assert.Zero(t, n, "the resent entry is not applied again")
			assert.EqualValues(t, 1, m.ledger.belowMark.Load())
			lag, err := m.Lag(ctx)
			require.NoError(t, err)
			assert.Zero(t, lag, "acknowledged and deleted")
			s := m.totals(ctx, t, sku)
			assert.EqualValues(t, 2*calls, s.sold, "every move applied once")
			checkDrained(t, s, initial)
		})
	}
}

// ledgerSize returns the ledger rows of sku and the bytes of their keys.
func ledgerSize(t *testing.T, m *Manager, sku string) (rows, bytes int64) {
	t.Helper()
	var ids []string
	require.NoError(t, m.db.Select(&ids, "SELECT entry_id FROM "+m.cfg.tablePrefix+"synced WHERE sku = "+placeholder(m, 1), sku))
	for _, id := range ids {
		bytes += int64(len(sku) + len(id) + 8) // sku, entry id, ms
	}
	return int64(len(ids)), bytes
}

func placeholder(m *Manager, i int) string {
	if m.db.DriverName() == "pgx" {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}
