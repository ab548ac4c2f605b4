package segment_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/segment"
	"github.com/stockkit/inventory/sqlstore"
)

// redisClients runs fn on the standalone Redis and on the Redis Cluster.
func redisClients(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { fn(t, testenv.Redis(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, testenv.RedisCluster(t)) })
}

// newRedis returns a Redis Manager whose keys are t's, deleted at its end
// (prefix "" makes a fresh one).
func newRedis(t testing.TB, c redis.UniversalClient, prefix string, opts ...segment.Option) (*segment.Redis, string) {
	t.Helper()
	if prefix == "" {
		prefix = testenv.RedisPrefix(t, c)
	}
	m, err := segment.NewRedis(c, append([]segment.Option{segment.WithPrefix(prefix), segment.WithKeyTTL(time.Minute)}, opts...)...)
	require.NoError(t, err)
	return m, prefix
}

// TestRedisConformance runs the public suite on a single Redis and on the
// Cluster with 8 segments (the flash sale sells 100 units to 2,000 keyed
// buyers, the last unit included), and with one segment, where the
// remaining value is linearizable, on the Cluster.
func TestRedisConformance(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		inventorytest.Run(t, inventorytest.Config{
			RemainingNotLinearizable: true,
			RequireOrders:            true,
			Timeout:                  5 * time.Minute,
			NewManager: func(t *testing.T) inventory.StockManager {
				m, _ := newRedis(t, c, "")
				return m
			},
		})
	})
	t.Run("one segment", func(t *testing.T) {
		c := testenv.RedisCluster(t)
		inventorytest.Run(t, inventorytest.Config{
			RequireOrders: true,
			NewManager: func(t *testing.T) inventory.StockManager {
				m, _ := newRedis(t, c, "", segment.WithSegments(1))
				return m
			},
		})
	})
}

// TestRedisKeyedRetry: a keyed retry, through the same Manager or another
// one (another process), is ErrDuplicate with the first call's remaining
// value, also when the first call had to borrow from other segments.
func TestRedisKeyedRetry(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := bounded(t, time.Minute)
		m, prefix := newRedis(t, c, "")
		other, _ := newRedis(t, c, prefix)
		sku := "retry"
		require.NoError(t, m.Init(ctx, sku, 16)) // 2 a segment
		for i, qty := range []int64{1, 5} {      // 5: borrowed
			key := fmt.Sprint("buyer-", i)
			rem, err := m.Reduce(ctx, sku, qty, inventory.WithKey(key))
			require.NoError(t, err)
			for _, r := range []*segment.Redis{m, other} {
				again, err := r.Reduce(ctx, sku, qty, inventory.WithKey(key))
				require.ErrorIs(t, err, inventory.ErrDuplicate)
				require.Equal(t, rem, again)
			}
		}
		got, err := other.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 10, got)
	})
}

// TestRedisNoFalseSoldOut: with the stock spread so that no segment alone
// fits a Reduce, it succeeds, keyed or not, and a refusal carries the
// exact stock; units sold one by one go to the last.
func TestRedisNoFalseSoldOut(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := bounded(t, time.Minute)
		m, _ := newRedis(t, c, "")
		sku := "spread"
		sellThin(t, ctx, m, sku, inventory.WithKey("big"))

		require.NoError(t, m.Init(ctx, sku, 8))
		for i := range 8 { // keyed: each key's home drains, the next borrows
			rem, err := m.Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprint("k", i%3, "-", i)))
			require.NoError(t, err, "unit %d of 8", i+1)
			require.EqualValues(t, 7-i, rem)
		}
		_, err := m.Reduce(ctx, sku, 1, inventory.WithKey("late"))
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	})
}

// sellThin spreads 20 units of sku over m's 8 segments (2 or 3 each):
// a Reduce of 19, with opts, takes from several and leaves 1, one of 2 is
// refused with the exact stock, and a Return of 5 then a Reduce of 6
// leave 0.
func sellThin(t *testing.T, ctx context.Context, m inventory.StockManager, sku string, opts ...inventory.Option) {
	t.Helper()
	require.NoError(t, m.Init(ctx, sku, 20))
	rem, err := m.Reduce(ctx, sku, 19, opts...)
	require.NoError(t, err)
	require.EqualValues(t, 1, rem)
	rem, err = m.Reduce(ctx, sku, 2)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.EqualValues(t, 1, rem)
	rem, err = m.Return(ctx, sku, 5)
	require.NoError(t, err)
	require.EqualValues(t, 6, rem)
	rem, err = m.Reduce(ctx, sku, 6)
	require.NoError(t, err)
	require.Zero(t, rem)
}

// TestRedisSegmentsSpread: on the Cluster (3 masters) the 8 segments of a
// SKU land on every master, 2 or 3 on each.
func TestRedisSegmentsSpread(t *testing.T) {
	ctx := bounded(t, time.Minute)
	c := testenv.RedisCluster(t)
	shards, err := c.ClusterShards(ctx).Result()
	require.NoError(t, err)
	owner := func(slot int) string {
		for i, sh := range shards {
			for _, r := range sh.Slots {
				if int(r.Start) <= slot && slot <= int(r.End) {
					return fmt.Sprint("shard ", i)
				}
			}
		}
		return ""
	}
	for _, sku := range []string{"a", "hot-shoe", "鞋", "{x}", "}{"} {
		per := map[string]int{}
		for i := range segment.DefaultSegments {
			tag := rediskeys.SegmentTag(sku, i, segment.DefaultSegments)
			slot, err := c.ClusterKeySlot(ctx, "p"+tag+":g:"+sku).Result()
			require.NoError(t, err)
			per[owner(int(slot))]++
		}
		require.Len(t, per, len(shards), "sku %q: %v", sku, per)
		for addr, n := range per {
			require.True(t, n == 2 || n == 3, "sku %q: %d segments on %s", sku, n, addr)
		}
	}
}

var errCrash = errors.New("crashed (test hook)")

// TestRedisCrashMidTransfer: a borrow that stops after its sources gave
// units (before its home applied them) or after its home applied them
// (before the sources settled) loses no unit and sells none twice:
// Recover settles its transfers, and the SKU then sells exactly its
// stock.
func TestRedisCrashMidTransfer(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		for _, step := range []string{"departed", "arrived"} {
			t.Run(step, func(t *testing.T) {
				ctx := bounded(t, time.Minute)
				m, _ := newRedis(t, c, "")
				sku := "crash"
				require.NoError(t, m.Init(ctx, sku, 16)) // 2 a segment: a Reduce of 5 borrows
				restore := segment.SetRedisHook(func(s string) error {
					if s == step {
						return errCrash
					}
					return nil
				})
				_, err := m.Reduce(ctx, sku, 5, inventory.WithKey("k"))
				restore()
				require.ErrorIs(t, err, errCrash)
				sold := int64(0)
				if step == "arrived" {
					sold = 5
				}
				got, err := m.Get(ctx, sku) // the units in transfer are counted
				require.NoError(t, err)
				require.GreaterOrEqual(t, got, 16-sold)
				n, err := m.Recover(ctx, sku)
				require.NoError(t, err)
				require.Positive(t, n, "transfers settled")
				got, err = m.Get(ctx, sku)
				require.NoError(t, err)
				require.Equal(t, 16-sold, got, "after recovery")
				rem, err := m.Reduce(ctx, sku, 5, inventory.WithKey("k"))
				if step == "arrived" {
					require.ErrorIs(t, err, inventory.ErrDuplicate, "the crashed call took effect")
					require.EqualValues(t, 11, rem)
				} else {
					require.NoError(t, err, "the crashed call took nothing")
					sold = 5
				}
				rem, err = m.Reduce(ctx, sku, 16-sold)
				require.NoError(t, err)
				require.Zero(t, rem)
				n, err = m.Recover(ctx, sku)
				require.NoError(t, err)
				require.Zero(t, n)
			})
		}
	})
}

// TestRedisSale sells 100 units to 10,000 keyed buyers (500 at a time)
// on the Cluster, through four Managers, and every buyer repeats its call
// through another Manager: exactly 100 sold, the last unit included, and
// each repeat of a sale is ErrDuplicate.
func TestRedisSale(t *testing.T) {
	c := testenv.RedisCluster(t)
	ms := make([]*segment.Redis, 4)
	var prefix string
	for i := range ms {
		ms[i], prefix = newRedis(t, c, prefix)
	}
	ctx := bounded(t, 3*time.Minute)
	const stock, buyers, workers = 100, 10000, 500
	sku := "sale"
	require.NoError(t, ms[0].Init(ctx, sku, stock))
	var sold, dups, refused, contention atomic.Int64
	call := func(m *segment.Redis, key string) error {
		for {
			_, err := m.Reduce(ctx, sku, 1, inventory.WithKey(key))
			if !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
				return err
			}
			contention.Add(1)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < buyers; i = int(next.Add(1)) - 1 {
				key := fmt.Sprint("buyer-", i)
				first := call(ms[i%4], key)
				again := call(ms[(i+1)%4], key)
				switch {
				case first == nil:
					sold.Add(1)
					if errors.Is(again, inventory.ErrDuplicate) {
						dups.Add(1)
					} else {
						t.Errorf("buyer %d bought, and its repeat returned %v, not ErrDuplicate", i, again)
					}
				case errors.Is(first, inventory.ErrInsufficientStock):
					refused.Add(1)
					if again == nil {
						sold.Add(1)
					} else if !errors.Is(again, inventory.ErrInsufficientStock) {
						t.Errorf("buyer %d: repeat after a refusal: %v", i, again)
					}
				default:
					t.Errorf("buyer %d: %v", i, first)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d buyers in %v: sold %d, %d repeats told ErrDuplicate, %d refused, %d ErrContention retries",
		buyers, time.Since(start).Round(time.Millisecond), sold.Load(), dups.Load(), refused.Load(), contention.Load())
	got, err := ms[3].Get(ctx, sku)
	require.NoError(t, err)
	require.EqualValues(t, stock, sold.Load(), "exactly the stock is sold")
	require.Zero(t, got, "the last unit is sold")
}

// TestRedisOptions: the options rule, and what NewRedis refuses.
func TestRedisOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []segment.Option{segment.WithSegments(0), segment.WithSegments(segment.MaxSegments + 1),
		segment.WithKeyTTL(0), segment.WithPrefix("a{b"), segment.WithPrefix(""),
		segment.WithSchema(sqlstore.Schema{Table: "s"})} {
		_, err := segment.NewRedis(c, o)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
	_, err := segment.NewRedis(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	m, err := segment.NewRedis(c, nil, segment.WithSegments(1), segment.WithPrefix("p"))
	require.NoError(t, err)
	_, err = m.Recover(context.Background(), "")
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}
