package tiered

import (
	"context"
	"errors"
	"strconv"
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

// privateSQL are the private database servers the SQL faults kill.
var privateSQL = []struct {
	name  string
	start func(testing.TB) *faulttest.SQLServer
}{
	{"mariadb", faulttest.StartMariaDB},
	{"postgres", faulttest.StartPostgres},
}

// syncedBy is what the syncers of syncers applied: entries (each holds
// the moves of a lone call, or of one SKU in a merged batch), the units
// sold and returned they held, and how many syncs failed.
type syncedBy struct{ entries, sold, returned, failed int64 }

// syncers runs n syncers (Managers of their own, as separate processes
// would be) until the returned stop is called; stop returns what they
// applied, and failed how many syncs failed so far.
func syncers(t *testing.T, e *env, n int, opts ...Option) (stop func() syncedBy, failed func() int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var entries, sold, returned, fails atomic.Int64
	for range n {
		s := e.manager(t, append([]Option{WithSyncBatch(16)}, opts...)...)
		s.applied = func(s, r int64) { sold.Add(s); returned.Add(r) }
		wg.Go(func() {
			for ctx.Err() == nil {
				k, err := s.Sync(ctx)
				entries.Add(int64(k))
				if err != nil && ctx.Err() == nil {
					fails.Add(1)
				}
				if k == 0 {
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		})
	}
	return func() syncedBy {
		cancel()
		wg.Wait()
		return syncedBy{entries.Load(), sold.Load(), returned.Load(), fails.Load()}
	}, fails.Load
}

// caughtUp waits until the syncers have applied every journal entry.
func caughtUp(ctx context.Context, t *testing.T, m *Manager) {
	t.Helper()
	require.NoError(t, faulttest.Eventually(ctx, func() error {
		lag, err := m.Lag(ctx)
		if err == nil && lag > 0 {
			err = errors.New(strconv.FormatInt(lag, 10) + " entries not synced")
		}
		return err
	}))
}

// TestSQLDownWhileRedisSells SIGKILLs a private MariaDB or PostgreSQL
// mid-sale for 1.5 s (and until Redis sold and the syncer failed): Redis goes on selling its allotment (then calls
// needing a grant fail, and change nothing), the syncer fails meanwhile
// and catches up after the restart; SQL ends with every sale Redis
// acknowledged, once.
func TestSQLDownWhileRedisSells(t *testing.T) {
	for _, eng := range privateSQL {
		t.Run(eng.name, func(t *testing.T) {
			srv := eng.start(t)
			e := newEnv(t, testenv.Redis(t), srv.Open(t, 24))
			m := e.manager(t, WithChunk(100), WithLowWater(60), WithRefillTimeout(500*time.Millisecond))
			ctx := ctxT(t, time.Minute)
			const initial, buyers = 1000, 16
			const sku = "a"
			require.NoError(t, m.Init(ctx, sku, initial))
			stopSync, syncFailed := syncers(t, e, 1)

			var phase atomic.Int32 // 0 up, 1 SQL killed, 2 restarted
			var ok, okDown, failedDown, failedUp atomic.Int64
			// The buyers call under gate's read lock: the kill takes the
			// write lock, so that no call runs while SQL dies.
			var gate sync.RWMutex
			var wg sync.WaitGroup
			for range buyers {
				wg.Go(func() {
					for ctx.Err() == nil {
						gate.RLock()
						ph := phase.Load()
						cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
						_, err := m.Reduce(cctx, sku, 1)
						cancel()
						gate.RUnlock()
						switch {
						case err == nil:
							ok.Add(1)
							if ph == 1 {
								okDown.Add(1)
							}
							continue
						case errors.Is(err, inventory.ErrInsufficientStock):
							return
						case ph == 1:
							failedDown.Add(1)
						default:
							failedUp.Add(1)
						}
						time.Sleep(2 * time.Millisecond)
					}
				})
			}
			for ok.Load() < 200 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			// Kill SQL, with no call in flight, once Redis holds units to
			// sell on its own: between grants its allotment may be empty,
			// the refill in flight, and the buyers could sell it all while
			// SQL dies (a kill takes a while).
			for {
				gate.Lock()
				a, err := m.rdb.HGet(ctx, m.stateKey(sku), "a").Int64()
				if err == nil && a >= 20 {
					srv.Kill()
					phase.Store(1)
					gate.Unlock()
					break
				}
				gate.Unlock()
				require.NoError(t, err)
				require.NoError(t, ctx.Err())
				time.Sleep(5 * time.Millisecond)
			}
			// Down for 1.5 s, and until Redis sold and the syncer failed
			// meanwhile: a fixed 1.5 s may see neither on a loaded machine.
			down := time.Now()
			for time.Since(down) < 1500*time.Millisecond || okDown.Load() == 0 || syncFailed() == 0 {
				if ctx.Err() != nil {
					t.Fatalf("SQL down %v: %d sold, %d syncs failed meanwhile", time.Since(down), okDown.Load(), syncFailed())
				}
				time.Sleep(time.Millisecond)
			}
			lagDown, err := e.rdb.XLen(ctx, m.journalKey(sku)).Result() // entries waiting for SQL
			require.NoError(t, err)
			srv.Start()
			phase.Store(2)
			wg.Wait()
			require.NoError(t, ctx.Err())
			caughtUp(ctx, t, m) // the syncer catches up on its own
			by := stopSync()
			final, err := m.Reconcile(ctx, sku)
			require.NoError(t, err)
			assert.True(t, final[0].Clean(), "%+v", final[0])
			s := m.totals(ctx, t, sku)
			t.Logf("%s: %d sold while SQL was down, %d calls failed then (%d after); syncer applied %d entries (%d units sold), %d syncs failed; lag at restart %d entries; refill failures %d",
				eng.name, okDown.Load(), failedDown.Load(), failedUp.Load(), by.entries, by.sold, by.failed, lagDown, m.RefillFailures())
			logFigures(t, eng.name+" down while Redis sells", sku, s, initial, ok.Load(), nil, final)
			assert.Positive(t, okDown.Load(), "Redis sold while SQL was down")
			assert.Positive(t, by.failed, "the syncer failed while SQL was down")
			// Redis never went down, but on a loaded machine its calls may
			// time out often enough to open the circuit: the fallback's
			// sales (direct) count then.
			assert.Equal(t, ok.Load(), s.sold+s.direct, "SQL has every sale acknowledged, once; the failed calls changed nothing")
			// The line above is the exactly-once check. The syncer's own
			// count can fall short of it, never exceed it: a commit whose
			// reply the kill cut may have landed (the next sync finds its
			// entries in the ledger and applies them no more).
			assert.LessOrEqual(t, by.sold, s.sold, "the syncer let no more units into SQL than SQL has")
			assert.Zero(t, by.returned)
			assert.EqualValues(t, initial, ok.Load(), "sold out")
		})
	}
}

// TestTwoSyncers runs two syncers on one journal, each taking over what
// the other read after a millisecond (WithClaimIdle), so that both apply
// the same entries at once again and again: the ledger lets each entry in
// once, and SQL's sales are exactly the sales Redis made.
func TestTwoSyncers(t *testing.T) {
	rdb := testenv.Redis(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			m := e.manager(t, WithChunk(25), WithLowWater(10))
			ctx := ctxT(t, time.Minute)
			skus := []string{"a", "b", "c"}
			const initial, buyers = 120, 12
			for _, sku := range skus {
				require.NoError(t, m.Init(ctx, sku, initial))
			}
			stopSync, _ := syncers(t, e, 2, WithClaimIdle(time.Millisecond), WithSyncBatch(4))
			var taken, returned atomic.Int64
			var wg sync.WaitGroup
			for i := range buyers {
				wg.Go(func() {
					sku := skus[i%len(skus)]
					for n := 0; ; n++ {
						_, err := m.Reduce(ctx, sku, 1)
						if errors.Is(err, inventory.ErrInsufficientStock) || !assert.NoError(t, err) {
							return
						}
						taken.Add(1)
						if n%10 == 9 {
							_, err := m.Return(ctx, sku, 1)
							require.NoError(t, err)
							returned.Add(1)
						}
					}
				})
			}
			wg.Wait()
			caughtUp(ctx, t, m)
			by := stopSync()
			t.Logf("%s: %d reduces and %d returns; the two syncers applied %d entries (%d units sold, %d returned), %d syncs failed",
				eng.name, taken.Load(), returned.Load(), by.entries, by.sold, by.returned, by.failed)
			assert.Equal(t, taken.Load(), by.sold, "each entry applied exactly once: the syncers let in the units of every Reduce, once")
			assert.Equal(t, returned.Load(), by.returned, "and of every Return, once")
			var sold, back int64
			for _, sku := range skus {
				s := m.totals(ctx, t, sku)
				sold += s.sold
				back += s.returned
				checkDrained(t, s, initial)
				assert.Zero(t, s.pool+s.allot, "sold out")
			}
			assert.Equal(t, taken.Load(), sold)
			assert.Equal(t, returned.Load(), back)
		})
	}
}

// TestSale10k sells one SKU to 10,000 buyers, served by a pool of 200
// workers, through three faults in turn: a private Redis SIGKILLed and
// restarted from its AOF, the same Redis stopped (SIGSTOP, unreachable)
// while the fallback sells, and a private MariaDB SIGKILLed while Redis
// sells. Two syncers run throughout. Half the buyers use idempotency keys
// and retry until their call is known; the others retry too, so a call
// whose outcome was unknown may have taken a unit unseen. Never more than
// the stock is sold, and after recovery SQL and Redis agree.
func TestSale10k(t *testing.T) {
	rsrv := faulttest.StartRedis(t)
	dsrv := faulttest.StartMariaDB(t)
	rdb := redis.NewClient(&redis.Options{Addr: rsrv.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, PoolSize: 64, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb, dsrv.Open(t, 32))
	m := e.manager(t, WithChunk(200), WithLowWater(80), WithBreaker(3, 300*time.Millisecond), WithMaxAttempts(20))
	ctx := ctxT(t, 2*time.Minute)
	const initial, buyers, workers = 6000, 10000, 200
	const sku = "hot"
	require.NoError(t, m.Init(ctx, sku, initial))
	_, err := m.Warm(ctx, sku)
	require.NoError(t, err)
	stopSync, _ := syncers(t, e, 2, WithClaimIdle(5*time.Second))

	var next, acked, dups, refused, unknownUnkeyed, errs atomic.Int64
	var kindsMu sync.Mutex
	kinds := map[string]int{}
	t.Cleanup(func() {
		kindsMu.Lock()
		defer kindsMu.Unlock()
		for k, n := range kinds {
			if n > 20 {
				t.Logf("error %6d x %s", n, k)
			}
		}
	})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				b := next.Add(1) - 1
				if b >= buyers || ctx.Err() != nil {
					return
				}
				var opts []inventory.Option
				if b%2 == 0 {
					opts = append(opts, inventory.WithKey("buyer-"+strconv.FormatInt(b, 10)))
				}
				for ctx.Err() == nil {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := m.Reduce(cctx, sku, 1, opts...)
					cancel()
					if err == nil {
						acked.Add(1)
						break
					}
					if errors.Is(err, inventory.ErrDuplicate) {
						acked.Add(1) // an earlier call of this buyer took effect
						dups.Add(1)
						break
					}
					if errors.Is(err, inventory.ErrInsufficientStock) && !errors.Is(err, ErrFallback) {
						refused.Add(1)
						break
					}
					// SQL's pool short while Redis is out of reach, a keyed
					// call refused meanwhile, contention, or an unknown
					// outcome: try again.
					errs.Add(1)
					kindsMu.Lock()
					k := err.Error()
					if len(k) > 90 {
						k = k[:90]
					}
					kinds[k]++
					kindsMu.Unlock()
					if opts == nil && !errors.Is(err, ErrFallback) && !errors.Is(err, inventory.ErrContention) {
						unknownUnkeyed.Add(1)
					}
					if errors.Is(err, ErrRedisUnreachable) {
						time.Sleep(50 * time.Millisecond) // until the circuit closes
					} else {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}
		})
	}
	began := time.Now()
	waitFor := func(what string, n int64) {
		t.Helper()
		defer func() {
			recs, n, err := m.Recoveries()
			t.Logf("%v: %s: %d acknowledged, %d refused, %d errors, %d fallbacks; %d recoveries, %d failed (%v)", time.Since(began).Round(time.Millisecond), what, acked.Load(), refused.Load(), errs.Load(), m.Fallbacks(), len(recs), n, err)
		}()
		for acked.Load() < n {
			if ctx.Err() != nil {
				t.Fatalf("%s: %d acknowledged: %v", what, acked.Load(), ctx.Err())
			}
			time.Sleep(time.Millisecond)
		}
		for { // the circuit closed again
			m.br.mu.Lock()
			closed := m.br.state == brClosed
			m.br.mu.Unlock()
			if closed || ctx.Err() != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("before the Redis kill", 1000)
	rsrv.Kill()
	time.Sleep(time.Second)
	rsrv.Start()
	fallbacksKill := m.Fallbacks()
	waitFor("before the Redis stop", 2500)
	rsrv.Pause()
	// A second at least, and until the timeouts opened the circuit and the
	// fallback sold (on a loaded machine a second's timeouts were seen to
	// fall short of opening it).
	stopped := time.Now()
	for (time.Since(stopped) < time.Second || m.Fallbacks() == fallbacksKill) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	rsrv.Resume()
	fallbacksStop := m.Fallbacks() - fallbacksKill
	waitFor("before the MariaDB kill", 4000)
	// Kill MariaDB just after a grant landed: Redis sells only its
	// allotment while SQL is down, and between grants it may be empty
	// with the refill in flight (CI saw 0 sold in that second).
	for {
		a, err := m.rdb.HGet(ctx, m.stateKey(sku), "a").Int64()
		require.NoError(t, err)
		if a >= 100 {
			break
		}
		require.NoError(t, ctx.Err())
	}
	atKill := acked.Load()
	dsrv.Kill()
	// A second at least, and until Redis sold from its allotment.
	killed := time.Now()
	for (time.Since(killed) < time.Second || acked.Load() == atKill) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	soldSQLDown := acked.Load() - atKill
	dsrv.Start()
	wg.Wait()
	require.NoError(t, ctx.Err())
	caughtUp(ctx, t, m)
	by := stopSync()
	recs, recFails, _ := m.Recoveries()
	final, err := m.Reconcile(ctx, sku)
	require.NoError(t, err)
	s := m.totals(ctx, t, sku)
	t.Logf("10,000 buyers: %d acknowledged (%d by ErrDuplicate on a keyed retry), %d refused, %d failed calls retried (%d unkeyed of unknown outcome); fallback calls %d during the Redis kill, %d during the stop; %d sold while MariaDB was down; %d recoveries (%d failed); the syncers applied %d entries (%d units sold; the recoveries' Reconciles the rest), %d syncs failed",
		acked.Load(), dups.Load(), refused.Load(), errs.Load(), unknownUnkeyed.Load(), fallbacksKill, fallbacksStop, soldSQLDown, len(recs), recFails, by.entries, by.sold, by.failed)
	logFigures(t, "10,000-buyer sale through a Redis kill, a Redis stop and a MariaDB kill", sku, s, initial, acked.Load(), recs, final)
	assert.EqualValues(t, buyers, acked.Load()+refused.Load(), "every buyer got an answer")
	// A killed Redis refuses connections at once, and go-redis's dial
	// retries may carry the calls over a short outage without a failure
	// the breaker counts (seen on a quiet machine: 2 errors in the second
	// the Redis was down); a stopped one times them out, which opens it.
	assert.Positive(t, fallbacksStop, "the fallback sold while Redis was stopped")
	assert.Positive(t, soldSQLDown, "Redis sold while MariaDB was down")
	assert.GreaterOrEqual(t, len(recs), 1, "the circuit closed through a recovery after the Redis faults that opened it")
	taken := s.sold + s.direct - s.returned
	assert.LessOrEqual(t, acked.Load(), taken, "AOF with fsync always: no acknowledged sale lost")
	assert.LessOrEqual(t, taken, acked.Load()+unknownUnkeyed.Load(), "nothing taken that no call could have taken")
	// Each journal entry applied once: logFigures' checkDrained holds
	// Redis's allotment (every move counted once) to SQL's grants less its
	// synced sales.
	assert.True(t, final[0].Clean(), "%+v", final[0])
}
