package tiered

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
)

// pairLog collects what WithDoubleApplied reports.
type pairLog struct {
	mu    sync.Mutex
	pairs []DoubleApply
}

func (l *pairLog) add(p DoubleApply) {
	l.mu.Lock()
	l.pairs = append(l.pairs, p)
	l.mu.Unlock()
}

func (l *pairLog) all() []DoubleApply {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]DoubleApply(nil), l.pairs...)
}

// TestKeyedFallback runs keyed calls through the fallback
// (WithKeyedFallback) on a private Redis killed and restarted: a key
// synced before the outage is refused by SQL (ErrDuplicate, with the
// remaining stock Redis returned); a key Redis applied and had not synced
// is applied again, and the pair is reported once the journal reaches SQL
// (callback and Drift), its units given back when asked; a key the
// fallback applied is refused by SQL, inside one batch too, and by Redis
// after the recovery copied it.
func TestKeyedFallback(t *testing.T) {
	for _, eng := range engines {
		for _, giveBack := range []bool{true, false} {
			if !giveBack && eng.name != "mariadb" {
				continue
			}
			t.Run(fmt.Sprintf("%s/giveBack=%v", eng.name, giveBack), func(t *testing.T) {
				keyedFallback(t, eng.open(t), giveBack)
			})
		}
	}
}

func keyedFallback(t *testing.T, db *sqlx.DB, giveBack bool) {
	var log pairLog
	srv, m := privateManager(t, db, WithChunk(10), WithLowWater(0), WithBreaker(1, 100*time.Millisecond),
		WithKeyedFallback(giveBack), WithDoubleApplied(log.add), WithLedger())
	ctx := ctxT(t, time.Minute)
	require.NoError(t, m.CreateTables(ctx))
	const sku, initial = "a", 100
	key := func(k string) inventory.Option { return inventory.WithKey(k) }
	require.NoError(t, m.Init(ctx, sku, initial))
	synced, err := m.Reduce(ctx, sku, 1, key("synced"))
	require.NoError(t, err)
	require.NoError(t, m.Drain(ctx))
	_, err = m.Reduce(ctx, sku, 1, key("unsynced")) // Redis applies it; SQL does not know it
	require.NoError(t, err)

	srv.Kill()
	sellDown(ctx, t, m, sku, 1) // opens the circuit
	pool := int64(initial - 10 - 1)

	rem, err := m.Reduce(ctx, sku, 1, key("synced"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "a key synced before the outage")
	require.ErrorIs(t, err, ErrFallback)
	assert.Equal(t, synced, rem, "the remaining stock Redis returned")

	rem, err = m.Reduce(ctx, sku, 1, key("unsynced"))
	require.NoError(t, err, "SQL cannot know a key Redis had not synced")
	pool--
	assert.Equal(t, pool, rem)

	rem, err = m.Reduce(ctx, sku, 2, key("new"))
	require.NoError(t, err)
	pool -= 2
	require.Equal(t, pool, rem)
	again, err := m.Reduce(ctx, sku, 2, key("new"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	assert.Equal(t, rem, again)
	rem, err = m.Return(ctx, sku, 1, key("new")) // another direction: another key
	require.NoError(t, err)
	pool++
	assert.Equal(t, pool, rem)

	// One key from many callers at once: one takes effect, in a batch or not.
	var ok, dup atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Reduce(ctx, sku, 1, key("burst"))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, inventory.ErrDuplicate):
				dup.Add(1)
			default:
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 1, ok.Load())
	assert.EqualValues(t, 7, dup.Load())
	pool--

	srv.Start()
	rec := m.awaitRecovery(ctx, t)
	pairs := log.all()
	require.Len(t, pairs, 1, "the key Redis and SQL both applied: %+v", pairs)
	p := pairs[0]
	assert.Equal(t, DoubleApply{SKU: sku, Key: "unsynced", Dir: "reduce", First: srcSQL, Entry: p.Entry, Qty: 1, GivenBack: p.GivenBack}, p)
	require.Len(t, rec.Drifts, 1, "%+v", rec)
	assert.EqualValues(t, 1, rec.Drifts[0].DoubleApplied, "%+v", rec.Drifts[0])
	want := int64(0)
	if giveBack {
		want = 1
		pool++
	}
	assert.Equal(t, want, p.GivenBack)
	assert.Equal(t, want, rec.Drifts[0].GivenBack)

	// The recovery copied the fallback's keys into Redis.
	rem, err = m.Reduce(ctx, sku, 2, key("new"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "Redis honours the fallback's key")
	require.NotErrorIs(t, err, ErrFallback)
	assert.EqualValues(t, initial-10-1-1-2, rem, "the remaining stock the fallback returned")
	_, err = m.Reduce(ctx, sku, 1, key("burst"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	_, err = m.Reduce(ctx, sku, 1, key("unsynced"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)

	require.NoError(t, m.Drain(ctx))
	final, err := m.Reconcile(ctx, sku)
	require.NoError(t, err)
	assert.Zero(t, final[0].DoubleApplied, "each pair is reported once: %+v", final[0])
	assert.True(t, final[0].Clean(), "%+v", final[0])
	assert.Len(t, log.all(), 1, "reported once")
	s := m.totals(ctx, t, sku)
	checkSQL(t, s, initial)
	assert.Equal(t, pool, s.pool)
	// Sold: synced, unsynced (twice, once when given back), new (2, less
	// the Return of 1), burst, and the unkeyed fallback sale.
	sold := int64(1 + 2 + 2 - 1 + 1 + 1)
	if giveBack {
		sold--
	}
	assert.Equal(t, sold, s.sold-s.returned+s.direct, "%+v", s)

	// The ledger adds up: both applications of the key, the units given
	// back (a return no call made), and the allotment the recovery found
	// gone after the restart (written off).
	st, err := ledger.Check(ctx, m, m, sku)
	require.NoError(t, err)
	assert.Equal(t, sold, st.Sold)
	var back, lost int64
	for _, e := range entries(ctx, t, m, sku) {
		switch {
		case e.Kind == ledger.Return && strings.HasPrefix(e.Ref, "tiered: given back: key unsynced "):
			back += e.Units
			assert.Empty(t, e.Key)
		case e.Kind.WrittenOff():
			lost += e.Units
		}
	}
	assert.Equal(t, want, back, "given back")
	assert.Equal(t, rec.Drifts[0].Lost, lost, "written off: %+v", rec.Drifts[0])
}

// keyedSale is the ledger of TestKeyedOutage's buyers.
type keyedSale struct {
	mu      sync.Mutex
	applied map[string]bool // keys whose call took effect (nil or ErrDuplicate)
	early   []string        // keys Redis acknowledged before the outage
	doubles map[string]bool // keys resent during the outage that the fallback applied again
}

// buy calls Reduce with key until the outcome is known: it took effect
// (nil or ErrDuplicate; true), or Redis says the SKU is sold out (false).
// The fallback's shortages and the failures of an unreachable Redis are
// retried with the same key.
func (s *keyedSale) buy(ctx context.Context, m *Manager, sku, key string, early bool) (fresh, ok bool) {
	for ctx.Err() == nil {
		_, err := m.Reduce(ctx, sku, 1, inventory.WithKey(key))
		switch {
		case err == nil, errors.Is(err, inventory.ErrDuplicate):
			s.mu.Lock()
			s.applied[key] = true
			if early && !errors.Is(err, ErrFallback) && err == nil {
				s.early = append(s.early, key)
			}
			s.mu.Unlock()
			return err == nil, true
		case errors.Is(err, inventory.ErrInsufficientStock) && !errors.Is(err, ErrFallback):
			return false, false // sold out (Redis checked the key first)
		default: // SQL's pool short while Redis is out of reach, or Redis unreachable
			time.Sleep(2 * time.Millisecond)
		}
	}
	return false, false
}

// TestKeyedOutage sells to keyed buyers (each key one buyer's click,
// retried until its outcome is known) through a 3-s outage of a private
// Redis, with WithKeyedFallback(true): the syncer is stopped a little
// before the kill, so that Redis holds acknowledged keyed sales SQL does
// not know, and during the outage every key Redis acknowledged before it
// is sent again (a buyer whose reply was lost). The fallback applies the
// unsynced ones a second time; once Redis is back and the syncer runs,
// every pair is reported (callback and Drift) and its units given back:
// then the units sold are exactly the keys that took effect (each buyer
// served once), never more than the stock, and no unit is lost beyond the
// allotment the recovery recorded lost.
func TestKeyedOutage(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) { keyedOutage(t, eng.open(t)) })
	}
}

func keyedOutage(t *testing.T, db *sqlx.DB) {
	var log pairLog
	srv, m := privateManager(t, db, WithChunk(20), WithLowWater(5), WithBreaker(2, 300*time.Millisecond),
		WithSyncInterval(200*time.Millisecond), WithKeyedFallback(true), WithDoubleApplied(log.add))
	ctx := ctxT(t, 3*time.Minute)
	const sku, initial, buyers = "a", 600, 32
	require.NoError(t, m.Init(ctx, sku, initial))
	syncCtx, stopSync := context.WithCancel(ctx)
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); _ = m.Run(syncCtx) }()

	sale := &keyedSale{applied: map[string]bool{}, doubles: map[string]bool{}}
	var phase atomic.Int32 // 0 Redis up, 1 down, 2 back
	var acked atomic.Int64
	var wg sync.WaitGroup
	for g := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				early := phase.Load() == 0
				if _, ok := sale.buy(ctx, m, sku, fmt.Sprintf("b%d-%d", g, n), early); !ok {
					return
				}
				acked.Add(1)
			}
		}()
	}
	for acked.Load() < 100 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	stopSync() // the syncer lags: what Redis acknowledges now, SQL does not know
	<-syncDone
	for n := acked.Load(); acked.Load() < n+30 && ctx.Err() == nil; {
		time.Sleep(time.Millisecond)
	}
	srv.Kill()
	phase.Store(1)
	down := time.Now()
	for m.Fallbacks() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	// The buyers whose replies were lost click again, the latest first
	// (those SQL does not know), until the outage ends.
	sale.mu.Lock()
	early := append([]string(nil), sale.early...)
	sale.mu.Unlock()
	slices.Reverse(early)
	rctx, cancel := context.WithDeadline(ctx, down.Add(3*time.Second))
	var resent, again int
	var unresolved []string
	for _, key := range early {
		fresh, ok := sale.buy(rctx, m, sku, key, false)
		if !ok {
			unresolved = append(unresolved, key) // cut by the end of the outage: its outcome is asked again
			continue
		}
		resent++
		if fresh {
			again++
			sale.mu.Lock()
			sale.doubles[key] = true
			sale.mu.Unlock()
		}
	}
	<-rctx.Done()
	cancel()
	srv.Start()
	phase.Store(2)
	syncCtx, stopSync = context.WithCancel(ctx)
	syncDone = make(chan struct{})
	go func() { defer close(syncDone); _ = m.Run(syncCtx) }()
	for _, key := range unresolved {
		if fresh, _ := sale.buy(ctx, m, sku, key, false); fresh {
			sale.mu.Lock()
			sale.doubles[key] = true // the fallback applied it after the recovery's copy
			sale.mu.Unlock()
		}
	}
	wg.Wait()
	require.NoError(t, ctx.Err())
	stopSync()
	<-syncDone
	require.NoError(t, m.Drain(ctx))
	final, err := m.Reconcile(ctx, sku)
	require.NoError(t, err)
	recs, _, _ := m.Recoveries()

	pairs := log.all()
	reported := map[string]bool{}
	var given int64
	for _, p := range pairs {
		assert.False(t, reported[p.Key], "pair %q reported once", p.Key)
		reported[p.Key] = true
		assert.Equal(t, srcSQL, p.First, "%+v", p)
		assert.EqualValues(t, 1, p.GivenBack, "%+v", p)
		given += p.GivenBack
	}
	var drifted, driftGiven int64
	for _, d := range append(final, recsDrifts(recs)...) {
		drifted += d.DoubleApplied
		driftGiven += d.GivenBack
	}
	sale.mu.Lock()
	defer sale.mu.Unlock()
	for key := range sale.doubles {
		assert.True(t, reported[key], "key %q applied twice was reported", key)
	}
	s := m.totals(ctx, t, sku)
	taken := s.sold + s.direct - s.returned
	t.Logf("FIGURES keyed outage: %d keys took effect of %d units; %d acknowledged by Redis before the kill, %d resent during the outage, %d applied again by the fallback; %d pairs reported (Drift: %d), %d units given back (Drift: %d); SQL: synced %d, direct %d, pool %d, lost %d; Redis allotment %d; %d fallback calls, %d recoveries",
		len(sale.applied), initial, len(early), resent, again, len(pairs), drifted, given, driftGiven, s.sold, s.direct, s.pool, s.lost, s.allot, m.Fallbacks(), len(recs))
	assert.Positive(t, again, "the lagging syncer left keys the fallback applied again")
	assert.EqualValues(t, len(pairs), drifted, "every pair is in a Drift once")
	assert.Equal(t, given, driftGiven)
	assert.EqualValues(t, len(sale.applied), taken, "every key took effect once: each pair found and given back")
	assert.LessOrEqual(t, taken, int64(initial), "never oversold")
	assert.Equal(t, int64(initial), taken+s.pool+s.allot+s.lost, "no unit lost beyond the allotment recorded lost: %+v", s)
	checkDrained(t, s, initial)
	assert.True(t, final[0].Clean(), "%+v", final[0])
}

// recsDrifts returns the drifts of recs.
func recsDrifts(recs []Recovery) []Drift {
	var out []Drift
	for _, r := range recs {
		out = append(out, r.Drifts...)
	}
	return out
}

// TestFallbackBatchKeys serves one merged batch of keyed and unkeyed calls
// in SQL (fbApply), as the fallback does: each call is decided in order, a
// key an earlier call of the batch used is a duplicate (per direction),
// a refused call leaves its key free, and the keys recorded are honoured
// by the next batch.
func TestFallbackBatchKeys(t *testing.T) {
	onEngines(t, testenv.Redis(t), func(ctx context.Context, t *testing.T, e *env) {
		m := e.manager(t, WithKeyedFallback(false))
		const sku = "a"
		require.NoError(t, m.Init(ctx, sku, 100))
		type call struct {
			qty  int64
			dir  driver.Direction
			key  string
			rem  int64
			want error
		}
		serve := func(calls ...call) {
			t.Helper()
			batch := make([]*fbCall, len(calls))
			for i, c := range calls {
				batch[i] = &fbCall{Ctx: ctx, Req: fbReq{qty: c.qty, dir: c.dir, key: c.key}}
			}
			m.fbApply(ctx, sku, nil, batch)
			for i, c := range calls {
				got := batch[i].Ans
				if c.want == nil {
					assert.NoError(t, got.err, "call %d", i)
				} else {
					assert.ErrorIs(t, got.err, c.want, "call %d", i)
					assert.ErrorIs(t, got.err, ErrFallback, "call %d", i)
				}
				assert.Equal(t, c.rem, got.rem, "call %d", i)
			}
		}
		red, ret := driver.DirReduce, driver.DirReturn
		serve(call{2, red, "x", 98, nil},
			call{1, red, "", 97, nil},
			call{2, red, "x", 98, inventory.ErrDuplicate}, // the batch's first "x"
			call{2, ret, "x", 99, nil},                    // another direction
			call{200, red, "y", 99, inventory.ErrInsufficientStock},
			call{1, red, "y", 98, nil}, // the refused call left its key free
			call{1, ret, "x", 99, inventory.ErrDuplicate})
		serve(call{5, red, "x", 98, inventory.ErrDuplicate}, // recorded in SQL
			call{1, red, "y", 98, inventory.ErrDuplicate},
			call{1, red, "z", 97, nil})
		s := m.totals(ctx, t, sku)
		assert.EqualValues(t, 97, s.pool)
		assert.EqualValues(t, 3, s.direct)
		checkSQL(t, s, 100)
	})
}

// TestSyncPairInOneBatch: two journal entries with one key (as a Redis
// that forgot its records writes) synced together are a pair, found in
// the syncer's batch, reported with First "redis" and given back.
func TestSyncPairInOneBatch(t *testing.T) {
	e := newEnv(t, testenv.Redis(t), testenv.MySQL(t))
	var log pairLog
	m := e.manager(t, WithKeyedFallback(true), WithDoubleApplied(log.add))
	ctx := ctxT(t, time.Minute)
	const sku = "a"
	require.NoError(t, m.Init(ctx, sku, 100))
	_, err := m.Reduce(ctx, sku, 1, inventory.WithKey("once")) // a grant, and a keyed entry
	require.NoError(t, err)
	s := m.totals(ctx, t, sku)
	for range 2 {
		require.NoError(t, e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: m.journalKey(sku),
			Values: []any{"n", s.gen, "d", "0", "s", "1", "h", "0", "k", "1 90 twice"}}).Err())
	}
	_, err = m.Sync(ctx)
	require.NoError(t, err)
	pairs := log.all()
	require.Len(t, pairs, 1, "%+v", pairs)
	assert.Equal(t, DoubleApply{SKU: sku, Key: "twice", Dir: driver.DirReduce, First: srcRedis, Entry: pairs[0].Entry, Qty: 1, GivenBack: 1}, pairs[0])
	var pool, gen, doubled, given int64
	require.NoError(t, m.db.QueryRowxContext(ctx, m.q.pairsRead, sku).Scan(&pool, &gen, &doubled, &given))
	assert.EqualValues(t, 1, doubled)
	assert.EqualValues(t, 1, given)
	assert.Equal(t, s.pool+1, pool, "the second move's unit given back to the pool")
}
