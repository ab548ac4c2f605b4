package tiered

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestFallbackRedisKilled sells a SKU while its private Redis is SIGKILLed
// for 1.5 s (and until the breaker opened and SQL sold) and then restarted from its AOF (fsync always): meanwhile the
// breaker sends calls to SQL, which sells only its unallotted pool; once
// Redis is back it sells its allotment. Never more than the stock is sold,
// and after Drain SQL and Redis agree on every unit.
func TestFallbackRedisKilled(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			srv := faulttest.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond,
				ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 32})
			t.Cleanup(func() { rdb.Close() })
			e := newEnv(t, rdb, eng.open(t))
			// AOF with fsync always: the restart loses nothing, and the
			// recovery may reconcile rather than drop (TestRestoredMidSale
			// covers the default).
			m := e.manager(t, WithChunk(50), WithLowWater(20), WithBreaker(3, 200*time.Millisecond), WithTrustRestarts())
			ctx := ctxT(t, time.Minute)
			const initial, buyers = 300, 16
			const sku = "a"
			require.NoError(t, m.Init(ctx, sku, initial))

			var phase atomic.Int32 // 0 Redis up, 1 killed, 2 restarted
			var ok, okDown, failed, keyedRefused atomic.Int64
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						ph := phase.Load()
						var opts []inventory.Option
						if i == 0 && ph == 1 {
							opts = append(opts, inventory.WithKey("k")) // refused while the circuit is open
						}
						rem, err := m.Reduce(ctx, sku, 1, opts...)
						switch {
						case err == nil:
							ok.Add(1)
							assert.GreaterOrEqual(t, rem, int64(0))
							if ph == 1 {
								okDown.Add(1)
							}
						case errors.Is(err, ErrRedisUnreachable):
							keyedRefused.Add(1)
						case errors.Is(err, inventory.ErrInsufficientStock):
							if ph == 2 && !errors.Is(err, ErrFallback) {
								return // Redis itself says sold out
							}
						default:
							failed.Add(1) // Redis unreachable: outcome unknown
						}
						if err != nil {
							time.Sleep(time.Millisecond)
						}
					}
				}()
			}
			for ok.Load() < 60 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			srv.Kill()
			phase.Store(1)
			// Down for 1.5 s, and for as long as it takes the breaker to
			// open and SQL to sell on its own: on a loaded machine a fixed
			// 1.5 s may not be enough for either.
			down := time.Now()
			for (time.Since(down) < 1500*time.Millisecond || m.Fallbacks() == 0 || okDown.Load() == 0 || failed.Load() == 0) && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			srv.Start()
			phase.Store(2)
			wg.Wait()
			require.NoError(t, ctx.Err())
			require.NoError(t, m.Drain(ctx))
			recs, _, _ := m.Recoveries()
			require.NotEmpty(t, recs, "the circuit closed through a recovery")
			assert.True(t, recs[0].Restarted, "the kill was seen as a restart: %+v", recs[0])
			final, err := m.Reconcile(ctx, sku)
			require.NoError(t, err)
			assert.True(t, final[0].Clean(), "%+v", final[0])

			s := m.totals(ctx, t, sku)
			logFigures(t, eng.name+", Redis SIGKILLed and restarted from AOF", sku, s, initial, ok.Load(), recs, final)
			t.Logf("%s: sold %d (%d while Redis was down, %d fallback calls), %d calls failed, %d keyed refused; SQL: synced %d, direct %d, pool %d, %d grants of %d units",
				eng.name, ok.Load(), okDown.Load(), m.Fallbacks(), failed.Load(), keyedRefused.Load(), s.sold, s.direct, s.pool, s.last, s.granted)
			assert.Positive(t, m.Fallbacks(), "the breaker opened")
			assert.Positive(t, s.direct, "SQL sold on its own while Redis was down")
			assert.Positive(t, failed.Load(), "calls failed before the breaker opened")
			assert.LessOrEqual(t, ok.Load(), int64(initial), "never oversold")
			// Calls that failed may have taken effect (Redis ran the script,
			// the reply was lost); none that succeeded is missing.
			assert.LessOrEqual(t, ok.Load(), s.sold+s.direct)
			assert.LessOrEqual(t, s.sold+s.direct, ok.Load()+failed.Load())
			assert.EqualValues(t, initial, s.sold+s.direct, "sold out, nothing lost (AOF with fsync always)")
			checkDrained(t, s, initial)
			assert.Zero(t, s.pool)
			assert.Zero(t, s.allot)
		})
	}
}

// TestDeadlineRedisHung: with Redis stopped (SIGSTOP), every call returns
// within its deadline plus DeadlineSlack; after enough of them the breaker
// opens and unkeyed calls are served by SQL's pool.
func TestDeadlineRedisHung(t *testing.T) {
	srv := faulttest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb, testenv.MySQL(t))
	m := e.manager(t, WithChunk(10), WithBreaker(3, time.Minute))
	ctx := ctxT(t, time.Minute)
	const sku = "a"
	require.NoError(t, m.Init(ctx, sku, 100))
	_, err := m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	// INFO gives Redis's uptime in whole seconds: a Redis started up to
	// two seconds before the outage would count as restarted.
	time.Sleep(3 * time.Second)
	srv.Pause()
	resumed := false
	t.Cleanup(func() { // before the keys are deleted
		if !resumed {
			srv.Resume()
		}
	})
	for _, c := range []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"Reduce", func(ctx context.Context) error { _, err := m.Reduce(ctx, sku, 1); return err }},
		{"Return", func(ctx context.Context) error { _, err := m.Return(ctx, sku, 1); return err }},
		{"Get", func(ctx context.Context) error { _, err := m.Get(ctx, sku); return err }},
	} {
		_, err := faulttest.CheckLate(t, c.what, 200*time.Millisecond, c.call)
		require.ErrorIs(t, err, context.DeadlineExceeded, c.what)
	}
	// Three calls failed: the circuit is open; SQL's pool serves.
	rem, err := m.Reduce(ctx, sku, 5)
	require.NoError(t, err)
	assert.EqualValues(t, 85, rem, "SQL's pool: 100 less the first grant of 10, less 5")
	_, err = m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, ErrRedisUnreachable)
	require.ErrorIs(t, err, ErrFallback)
	srv.Resume()
	resumed = true
	rec := m.recoverNow(ctx, t)
	assert.False(t, rec.Restarted, "Redis was paused, not restarted")
	require.Len(t, rec.Drifts, 1, "only the SKU the fallback moved: %+v", rec)
	assert.Equal(t, sku, rec.Drifts[0].SKU)
	assert.True(t, rec.Drifts[0].ViewFixed, "Redis's view of the pool had missed the fallback's 5: %+v", rec.Drifts[0])
	assert.Zero(t, rec.Drifts[0].Lost+rec.Drifts[0].Excess, "%+v", rec.Drifts[0])
	require.NoError(t, m.Drain(ctx))
	s := m.totals(ctx, t, sku)
	assert.Equal(t, s.pool, s.view, "reconciled before Redis took traffic again")
	checkSQL(t, s, 100)
	assert.EqualValues(t, 5, s.direct)
	// The Reduce and Return that timed out may have reached the stopped
	// Redis and run when it resumed (outcome unknown to their callers).
	assert.Contains(t, []int64{1, 2}, s.sold)
	assert.Contains(t, []int64{0, 1}, s.returned)
	assert.Equal(t, s.granted-s.sold+s.returned, s.allot)
}

// TestRedisRestartedEmpty empties a private Redis mid-sale (state, journal
// and keys gone, as a restart without persistence does): the SKU is warmed
// up again from SQL with an empty allotment, the sale goes on from SQL's
// pool, never more than the stock is sold, and Reconcile reports and
// records what was lost, after which SQL and Redis agree.
func TestRedisRestartedEmpty(t *testing.T) {
	srv := faulttest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb, testenv.MySQL(t))
	m := e.manager(t, WithChunk(40), WithLowWater(10))
	ctx := ctxT(t, time.Minute)
	const initial, buyers = 300, 16
	const sku = "a"
	require.NoError(t, m.Init(ctx, sku, initial))
	syncCtx, stopSync := context.WithCancel(ctx)
	synced := make(chan struct{})
	go func() { defer close(synced); _ = m.Run(syncCtx) }()

	var ok atomic.Int64
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, err := m.Reduce(ctx, sku, 1)
				if errors.Is(err, inventory.ErrInsufficientStock) {
					return
				}
				if assert.NoError(t, err) {
					ok.Add(1)
				} else {
					return
				}
			}
		}()
	}
	for ok.Load() < 100 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, rdb.FlushAll(ctx).Err())
	wg.Wait()
	stopSync()
	<-synced
	require.NoError(t, m.Drain(ctx))
	ds, err := m.Reconcile(ctx, sku)
	require.NoError(t, err)
	d := ds[0]
	s := m.totals(ctx, t, sku)
	t.Logf("sold %d of %d; SQL synced %d, %d grants of %d units; Reconcile: lost %d (%+v)", ok.Load(), initial, s.sold, s.last, s.granted, d.Lost, d)
	assert.LessOrEqual(t, ok.Load(), int64(initial), "never oversold")
	assert.LessOrEqual(t, s.sold, ok.Load(), "SQL never counts a sale that was not made")
	assert.LessOrEqual(t, ok.Load(), s.sold+s.lost, "every sale made is synced or inside the lost allotment")
	assert.Equal(t, d.Lost, s.lost)
	checkDrained(t, s, initial)
	ds, err = m.Reconcile(ctx, sku)
	require.NoError(t, err)
	assert.True(t, ds[0].Clean(), "%+v", ds[0])
}
