package tiered

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/faulttest"
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

// TestLedgerOutage sells one SKU on a private Redis, keyed, unkeyed,
// returned and through a hold, with no syncer, so that Redis's moves are
// in its journal alone; stops Redis (SIGSTOP) while the fallback sells
// from SQL's pool; and sells on Redis again after the recovery. During
// the outage a reader sees SQL's rows (Init and the fallback's); after
// it, every call that took effect has one entry, found by its reference,
// none has more, and the replay is the stock read back.
func TestLedgerOutage(t *testing.T) {
	srv := faulttest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb, testenv.MySQL(t))
	ledgerEnv(t, e)
	// A Redis started a moment ago looks restarted to the recovery (its
	// uptime), which would drop its allotment as lost (written off in the
	// ledger, see TestLedgerWriteOffs): this Redis forgot nothing
	// (stopped, not restarted), so trust it, and count every entry.
	m := e.manager(t, WithLedger(), WithChunk(20), WithLowWater(5), WithBreaker(3, 200*time.Millisecond), WithTrustRestarts())
	ctx := ctxT(t, time.Minute)
	const sku = "o"
	require.NoError(t, m.Init(ctx, sku, 200))

	took := map[string]bool{}    // references of calls that took effect
	unknown := map[string]bool{} // of calls whose outcome is unknown
	n := 0
	reduce := func(opts ...inventory.Option) error {
		n++
		ref := "call-" + strconv.Itoa(n)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := m.Reduce(cctx, sku, 1, append(opts, inventory.WithRef(ref))...)
		switch {
		case err == nil:
			took[ref] = true
		case errors.Is(err, inventory.ErrInsufficientStock), errors.Is(err, ErrRedisUnreachable):
		default:
			unknown[ref] = true
		}
		return err
	}
	for i := range 30 {
		var opts []inventory.Option
		if i%2 == 0 {
			opts = append(opts, inventory.WithKey("k"+strconv.Itoa(i)))
		}
		require.NoError(t, reduce(opts...))
	}
	_, err := m.Return(ctx, sku, 2, inventory.WithRef("refund"))
	require.NoError(t, err)
	took["refund"] = true
	require.NoError(t, m.Reserve(ctx, "h1", []inventory.Line{{SKU: sku, Qty: 3}}, time.Minute))
	require.NoError(t, m.Confirm(ctx, "h1"))

	srv.Pause()
	before := m.Fallbacks()
	for m.Fallbacks()-before < 10 {
		require.NoError(t, ctx.Err())
		_ = reduce()
	}
	during, err := m.Entries(ctx, sku, 0, ledger.MaxPage)
	require.NoError(t, err)
	fallback := 0
	for _, e := range during[1:] {
		require.True(t, took[e.Ref] || unknown[e.Ref], "an entry read during the outage is the fallback's: %+v", e)
		fallback++
	}
	require.Equal(t, ledger.Init, during[0].Kind)
	require.Positive(t, fallback, "the fallback's moves are read during the outage")
	srv.Resume()
	for m.br.open() {
		require.NoError(t, ctx.Err())
		time.Sleep(10 * time.Millisecond)
	}
	for range 10 {
		require.NoError(t, reduce())
	}
	require.NoError(t, m.Drain(ctx))

	recs, _, _ := m.Recoveries()
	require.NotEmpty(t, recs)
	for _, r := range recs {
		for _, d := range r.Drifts {
			require.Zero(t, d.Lost, "recovery %+v", r)
		}
	}
	st, err := ledger.Check(ctx, m, m, sku)
	require.NoError(t, err, "the replay is the stock after the recovery")
	all := entries(ctx, t, m, sku)
	seen := map[string]int{}
	for _, e := range all[1:] {
		if e.Hold != "" {
			continue
		}
		seen[e.Ref]++
	}
	for ref := range took {
		assert.Equal(t, 1, seen[ref], "entries of %s, which took effect", ref)
	}
	for ref, c := range seen {
		assert.True(t, took[ref] || (unknown[ref] && c == 1), "entries of %s: %d", ref, c)
	}
	t.Logf("%d entries (%d read during the outage, %d fallback calls); %d calls of unknown outcome; replayed to %+v",
		len(all), len(during), m.Fallbacks()-before, len(unknown), st)
}

// entries reads the whole history of sku.
func entries(ctx context.Context, t *testing.T, r ledger.Reader, sku string) []ledger.Entry {
	t.Helper()
	var out []ledger.Entry
	for e, err := range ledger.History(ctx, r, sku, 0) {
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

// TestLedgerWriteOffs: the stock a recovery finds gone, and the holds an
// Init drops, are written off in the ledger (ledger.Lost, LostHeld), in
// the transaction that records them, so that ledger.Check replays to Get
// and Held. A private Redis is SIGKILLed with a hold and part of its
// allotment, the fallback sells meanwhile, and Redis restarts: the fence
// drops its state, and the recovery re-warms it from SQL and records the
// allotment and the hold lost.
func TestLedgerWriteOffs(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			srv, m := privateManager(t, eng.open(t), WithLedger(), WithChunk(20), WithLowWater(0), WithBreaker(1, 100*time.Millisecond))
			ctx := ctxT(t, time.Minute)
			require.NoError(t, m.CreateTables(ctx))
			const sku = "w"
			require.NoError(t, m.Init(ctx, sku, 100))
			for range 5 {
				_, err := m.Reduce(ctx, sku, 1)
				require.NoError(t, err)
			}
			require.NoError(t, m.Reserve(ctx, "h1", []inventory.Line{{SKU: sku, Qty: 3}}, time.Minute))
			_, err := ledger.Check(ctx, m, m, sku)
			require.NoError(t, err)

			srv.Kill()
			sellDown(ctx, t, m, sku, 2)
			srv.Start()
			rec := m.awaitRecovery(ctx, t)
			require.True(t, rec.Restarted, "%+v", rec)
			require.Len(t, rec.Drifts, 1, "%+v", rec)
			d := rec.Drifts[0]
			require.True(t, d.RedisMissing, "%+v", d)
			require.Greater(t, d.Lost, int64(3), "the hold and the allotment left: %+v", d)
			st, err := ledger.Check(ctx, m, m, sku)
			require.NoError(t, err, "the replay is the stock after the recovery")
			assert.Equal(t, ledger.Stock{Available: 100 - 7 - d.Lost, Sold: 7}, st, "the hold's units are lost with it")

			var lost, lostHeld int64
			for _, e := range entries(ctx, t, m, sku) {
				switch e.Kind {
				case ledger.Lost:
					lost += e.Units
				case ledger.LostHeld:
					lostHeld += e.Units
				}
				// Redis's moves are dated by Redis's clock, Init, the
				// fallback's moves and the write-offs by the database's:
				// both on this machine.
				assert.WithinDuration(t, time.Now(), e.Time, time.Minute, "%+v", e)
				assert.Empty(t, e.Key, "%+v", e)
			}
			assert.EqualValues(t, 3, lostHeld, "the hold")
			assert.Equal(t, d.Lost, lost+lostHeld, "the write-offs are the loss recorded")

			// The hold is gone: its Confirm says so and records nothing.
			require.ErrorIs(t, m.Confirm(ctx, "h1"), inventory.ErrHoldReleased)
			_, err = ledger.Check(ctx, m, m, sku)
			require.NoError(t, err)

			// An Init drops the holds: their units are written off first.
			require.NoError(t, m.Reserve(ctx, "h2", []inventory.Line{{SKU: sku, Qty: 2}}, time.Minute))
			require.NoError(t, m.Init(driver.WithRef(ctx, "recount"), sku, 50))
			st, err = ledger.Check(ctx, m, m, sku)
			require.NoError(t, err)
			assert.Equal(t, ledger.Stock{Available: 50, Sold: 7}, st)
			es := entries(ctx, t, m, sku)
			n := len(es)
			assert.Equal(t, ledger.LostHeld, es[n-2].Kind, "%+v", es[n-2])
			assert.EqualValues(t, 2, es[n-2].Units)
			assert.Equal(t, ledger.Init, es[n-1].Kind)
			assert.Equal(t, "recount", es[n-1].Ref)
		})
	}
}
