package tiered

import (
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
)

// TestFallbackRedisKilled sells a SKU while its private Redis is SIGKILLed
// for 1.5 s and then restarted from its AOF (fsync always): meanwhile the
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
			m := e.manager(t, WithChunk(50), WithLowWater(20), WithBreaker(3, 200*time.Millisecond))
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
			time.Sleep(1500 * time.Millisecond)
			srv.Start()
			phase.Store(2)
			wg.Wait()
			require.NoError(t, ctx.Err())
			require.NoError(t, m.Drain(ctx))

			s := m.totals(ctx, t, sku)
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
