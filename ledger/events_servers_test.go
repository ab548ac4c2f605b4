package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/rowlock"
)

// ledgerManager is a Manager with holds that keeps a ledger.
type ledgerManager interface {
	inventory.StockManager
	inventory.OrderManager
	ledger.Reader
}

// TestEventsSQL runs the events' scenario on optimistic and rowlock with
// WithLedger, on every SQL engine.
func TestEventsSQL(t *testing.T) {
	for name, open := range map[string]func(t *testing.T, db *sqlx.DB) ledgerManager{
		"optimistic": func(t *testing.T, db *sqlx.DB) ledgerManager {
			m, err := optimistic.New(db, optimistic.WithSchema(sqltest.Schema(t, db)), optimistic.WithLedger())
			require.NoError(t, err)
			require.NoError(t, m.CreateTables(context.Background()))
			return m
		},
		"rowlock": func(t *testing.T, db *sqlx.DB) ledgerManager {
			m, err := rowlock.New(db, rowlock.WithSchema(sqltest.Schema(t, db)), rowlock.WithLedger())
			require.NoError(t, err)
			require.NoError(t, m.CreateTables(context.Background()))
			return m
		},
	} {
		t.Run(name, func(t *testing.T) {
			sqltest.Run(t, func(t *testing.T, db *sqlx.DB) { scenario(t, open(t, db)) })
		})
	}
}

// TestEventsRedis runs the events' scenario on luascript with
// WithLedger, on one Redis and on the Cluster.
func TestEventsRedis(t *testing.T) {
	for name, client := range map[string]func(testing.TB) redis.UniversalClient{
		"standalone": func(t testing.TB) redis.UniversalClient { return testenv.Redis(t) },
		"cluster":    func(t testing.TB) redis.UniversalClient { return testenv.RedisCluster(t) },
	} {
		t.Run(name, func(t *testing.T) {
			c := client(t)
			m, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)), luascript.WithLedger(0))
			require.NoError(t, err)
			scenario(t, m)
		})
	}
}

// scenario moves two SKUs through a sale that sells out, returns that
// bring stock back, threshold crossings and a hold that expires, then
// delivers their events through a feed whose handler fails, one stopped
// mid-way, and one from their saved cursors: every event is delivered,
// each SKU's in order, and a duplicate carries the same id.
func scenario(t *testing.T, m ledgerManager) {
	ctx := context.Background()
	const a, b = "shoe", "hat/blue:42" // b's name holds the ID's separator
	step := func(what string, err error) {
		t.Helper()
		require.NoError(t, err, what)
	}
	reduce := func(sku string, n int64, opts ...inventory.Option) error {
		_, err := m.Reduce(ctx, sku, n, opts...)
		return err
	}
	ret := func(sku string, n int64) error {
		_, err := m.Return(ctx, sku, n)
		return err
	}
	step("init a", m.Init(ctx, a, 5))                                                               // first Init: nothing
	step("sale a", reduce(a, 3, inventory.WithKey("buyer-1"), inventory.WithRef("order 1")))        // 5 -> 2: below 3
	step("sale a to 0", reduce(a, 2))                                                               // 2 -> 0: sold out
	step("return a", ret(a, 1))                                                                     // 0 -> 1: back
	step("init b", m.Init(ctx, b, 2))                                                               // first Init: nothing
	step("sale b to 0", reduce(b, 2))                                                               // 2 -> 0: below 1, sold out
	step("restock b", m.Init(ctx, b, 4))                                                            // 0 -> 4: back
	step("hold b", m.Reserve(ctx, "o-b", []inventory.Line{{SKU: b, Qty: 1}}, inventory.MaxHoldTTL)) // 4 -> 3
	step("pay b", m.Confirm(ctx, "o-b"))                                                            // held -> sold: nothing
	// The last unit of a held with a short TTL: sold out, then, once
	// Sweep releases it, hold expired and back in stock. No check here
	// needs the hold live: the scenario only waits for it to expire.
	ttl := 20 * time.Millisecond
	step("hold a", m.Reserve(ctx, "o-a", []inventory.Line{{SKU: a, Qty: 1}}, ttl)) // 1 -> 0: sold out
	expire(t, m, a, ttl)
	step("return b", ret(b, 1)) // 3 -> 4

	want := map[string][]string{
		a: {"reduce below_threshold 3", "reduce sold_out", "return back_in_stock", "reserve sold_out",
			"expire hold_expired", "expire back_in_stock"},
		b: {"reduce below_threshold 1", "reduce sold_out", "init back_in_stock"},
	}
	wantEvents := map[string][]ledger.Event{}
	for sku := range want {
		var c ledger.Cursor
		th := map[string]int64{a: 3, b: 1}[sku]
		for e, err := range ledger.History(ctx, m, sku, 0) {
			require.NoError(t, err)
			wantEvents[sku] = append(wantEvents[sku], ledger.Derive(c, e, th)...)
			c = ledger.Cursor{Pos: e.Pos, Available: e.After.Available}
		}
		var got []string
		for _, ev := range wantEvents[sku] {
			s := fmt.Sprintf("%s %s", ev.Entry.Kind, ev.Kind)
			if ev.Kind == ledger.BelowThreshold {
				s += fmt.Sprint(" ", ev.Threshold)
			}
			got = append(got, s)
			require.Equal(t, ledger.EventID(ev.Kind, ev.Entry.Pos, sku), ev.ID)
		}
		require.Equal(t, want[sku], got, "the events of %q's ledger", sku)
	}
	require.Equal(t, "order 1", wantEvents[a][0].Entry.Ref)
	require.Equal(t, "o-a", wantEvents[a][4].Entry.Hold)

	// The feeds: one whose handler fails at its 4th call, one that stops
	// (its ctx ends) after its 2nd, and one that runs to the end, on the
	// cursors the ones before saved.
	store := &ledger.MemoryCursors{}
	newFeed := func(d *deliveries) *ledger.Feed {
		f, err := ledger.NewFeed(m, []string{a, b}, d.handle, ledger.WithThreshold(1),
			ledger.WithSKUThreshold(a, 3), ledger.WithCursors(store))
		require.NoError(t, err)
		return f
	}
	boom := errors.New("boom")
	failing := &deliveries{hook: func(n int, _ ledger.Event) error {
		if n == 4 {
			return boom
		}
		return nil
	}}
	require.ErrorIs(t, newFeed(failing).Poll(ctx), boom)
	require.Len(t, failing.events(), 3+len(want[b]), "a up to its failure, all of b")

	stopCtx, stop := context.WithCancel(ctx)
	stopped := &deliveries{hook: func(n int, _ ledger.Event) error {
		if n == 2 {
			stop()
		}
		return nil
	}}
	require.ErrorIs(t, newFeed(stopped).Run(stopCtx, time.Hour, nil), context.Canceled)
	require.Len(t, stopped.events(), 2)
	require.Equal(t, wantEvents[a][3].ID, stopped.events()[0].ID, "a resumes at the event that failed")

	done := &deliveries{}
	require.NoError(t, newFeed(done).Poll(ctx))
	requireDelivered(t, wantEvents, failing.events(), stopped.events(), done.events())
	require.Equal(t, wantEvents[a][5].ID, done.events()[len(done.events())-1].ID)

	// A feed on the same cursors delivers nothing more; one on fresh
	// cursors delivers it all again, with the same ids.
	again, fresh := &deliveries{}, &deliveries{}
	require.NoError(t, newFeed(again).Poll(ctx))
	require.Empty(t, again.events())
	f, err := ledger.NewFeed(m, []string{a, b}, fresh.handle, ledger.WithThreshold(1), ledger.WithSKUThreshold(a, 3))
	require.NoError(t, err)
	require.NoError(t, f.Poll(ctx))
	require.Len(t, fresh.events(), len(wantEvents[a])+len(wantEvents[b]))
	requireDelivered(t, wantEvents, failing.events(), stopped.events(), done.events(), fresh.events())
}

// expire waits for the hold on sku, reserved with ttl, to expire, then
// Sweeps until it is released (by then the machine's load, not a
// finding, is all that can delay it).
func expire(t *testing.T, m inventory.OrderManager, sku string, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	time.Sleep(ttl)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := m.Sweep(ctx)
		require.NoError(t, err)
		held, err := m.Held(ctx, sku)
		require.NoError(t, err)
		if held == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the hold of %q, TTL %v, not released by Sweep within a minute", sku, ttl)
		time.Sleep(ttl)
	}
}
