package segment_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/segment"
)

// crashAt makes the step of the orders named by prefix ("line ", once the
// line of that many successful steps is taken; "confirmed") fail as a
// crash would, and records the line keys it saw. It restores the hook at
// the end of t.
func crashAt(t *testing.T, step string, after int) *[]string {
	t.Helper()
	var keys []string
	restore := segment.SetRedisHook(func(s string) error {
		if k, ok := strings.CutPrefix(s, "line "); ok {
			keys = append(keys, k)
		}
		if strings.HasPrefix(s, step) {
			if after == 0 {
				return errors.New("crash")
			}
			after--
		}
		return nil
	})
	t.Cleanup(restore)
	return &keys
}

// twoSKUs returns a Manager (with opts) whose attempts may take attempt
// and whose Confirms and Cancels Sweep finishes after grace, with SKUs a
// and b at 10 units.
func twoSKUs(t *testing.T, c redis.UniversalClient, attempt, grace time.Duration, opts ...segment.Option) *segment.Redis {
	t.Helper()
	m, _ := newRedis(t, c, "", opts...)
	m.SetOrderTimes(attempt, grace)
	require.NoError(t, m.Init(context.Background(), "a", 10))
	require.NoError(t, m.Init(context.Background(), "b", 10))
	return m
}

// levels checks the available and held units of sku.
func levels(t *testing.T, ctx context.Context, m *segment.Redis, sku string, avail, held int64) {
	t.Helper()
	got, err := m.Get(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, avail, got, "available units of %q", sku)
	h, err := m.Held(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, held, h, "held units of %q", sku)
}

// TestRedisReserveCrash: a Reserve that dies after its first line leaves
// that line held; its retry with the same id and lines takes the attempt
// over at once (releasing the dead attempt's line) and holds both.
func TestRedisReserveCrash(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := twoSKUs(t, c, segment.LinesTTL, segment.EndGrace)
		cart := []inventory.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}}
		crashAt(t, "line ", 0)
		require.Error(t, m.Reserve(ctx, "h1", cart, time.Minute))
		levels(t, ctx, m, "a", 8, 2)
		levels(t, ctx, m, "b", 10, 0)
		segment.SetRedisHook(nil)

		require.NoError(t, m.Reserve(ctx, "h1", cart, time.Minute), "the retry takes the dead attempt over")
		levels(t, ctx, m, "a", 8, 2)
		levels(t, ctx, m, "b", 7, 3)
		require.ErrorIs(t, m.Reserve(ctx, "h1", cart, time.Minute), inventory.ErrDuplicate)
		require.NoError(t, m.Confirm(ctx, "h1"))
		levels(t, ctx, m, "a", 8, 0)
		levels(t, ctx, m, "b", 7, 0)
	})
}

// TestRedisReserveCrashSwept: a Reserve that dies after its first line,
// and is never retried, is given back by Sweep once LinesTTL passed; its
// second line, should its take arrive late, finds the line void and takes
// nothing; and the hold id is free again.
func TestRedisReserveCrashSwept(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := twoSKUs(t, c, 200*time.Millisecond, 100*time.Millisecond)
		cart := []inventory.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}}
		keys := crashAt(t, "line ", 0)
		require.Error(t, m.Reserve(ctx, "h1", cart, time.Minute))
		segment.SetRedisHook(nil)
		require.Len(t, *keys, 1)

		n, err := m.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		levels(t, ctx, m, "a", 8, 2) // the attempt is not yet taken for dead
		time.Sleep(250 * time.Millisecond)
		_, err = m.Sweep(ctx)
		require.NoError(t, err)
		levels(t, ctx, m, "a", 10, 0)
		levels(t, ctx, m, "b", 10, 0)

		late := strings.TrimSuffix((*keys)[0], ":0") + ":1"
		_, err = m.LateLine(ctx, late, "b", 3, time.Minute.Milliseconds())
		require.ErrorIs(t, err, inventory.ErrDuplicate, "the late take of a line of a swept attempt")
		levels(t, ctx, m, "b", 10, 0)

		require.NoError(t, m.Reserve(ctx, "h1", cart, time.Minute), "a dead attempt leaves its id free")
		levels(t, ctx, m, "a", 8, 2)
		levels(t, ctx, m, "b", 7, 3)
	})
}

// TestRedisConfirmCrash: a Confirm that dies once its record is confirmed
// leaves the lines pinned (held, sold to nobody else); the record decides:
// a Cancel is refused, and Sweep sells the lines after EndGrace.
func TestRedisConfirmCrash(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := twoSKUs(t, c, time.Minute, 200*time.Millisecond)
		require.NoError(t, m.Reserve(ctx, "h1", []inventory.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}}, time.Minute))
		crashAt(t, "confirmed", 0)
		require.Error(t, m.Confirm(ctx, "h1"))
		segment.SetRedisHook(nil)
		levels(t, ctx, m, "a", 8, 2)
		require.ErrorIs(t, m.Cancel(ctx, "h1"), inventory.ErrHoldConfirmed)

		time.Sleep(250 * time.Millisecond)
		_, err := m.Sweep(ctx)
		require.NoError(t, err)
		levels(t, ctx, m, "a", 8, 0)
		levels(t, ctx, m, "b", 7, 0)
		require.ErrorIs(t, m.Confirm(ctx, "h1"), inventory.ErrDuplicate)
	})
}

// TestRedisLinesCrash: a keyed ReduceLines that dies after its first line
// keeps its key busy (ErrContention) until Sweep gives the line back once
// LinesTTL passed; then the key is free and the call's retry takes effect
// once.
func TestRedisLinesCrash(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := twoSKUs(t, c, 200*time.Millisecond, 100*time.Millisecond)
		cart := []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}}
		key := inventory.WithKey("cart-1")
		crashAt(t, "line ", 0)
		require.Error(t, m.ReduceLines(ctx, cart, key))
		segment.SetRedisHook(nil)
		levels(t, ctx, m, "a", 9, 0)
		require.ErrorIs(t, m.ReduceLines(ctx, cart, key), inventory.ErrContention, "the key of a call under way (or dead)")

		time.Sleep(250 * time.Millisecond)
		_, err := m.Sweep(ctx)
		require.NoError(t, err)
		levels(t, ctx, m, "a", 10, 0)
		levels(t, ctx, m, "b", 10, 0)
		require.NoError(t, m.ReduceLines(ctx, cart, key))
		require.ErrorIs(t, m.ReduceLines(ctx, cart, key), inventory.ErrDuplicate)
		levels(t, ctx, m, "a", 9, 0)
		levels(t, ctx, m, "b", 9, 0)
	})
}

// TestRedisCancelledMidway: a Reserve whose ctx ends after its first line
// returns at once and gives that line back (in the background, within a
// second), leaving its id free.
func TestRedisCancelledMidway(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		m := twoSKUs(t, c, segment.LinesTTL, segment.EndGrace)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(segment.SetRedisHook(func(step string) error {
			if strings.HasPrefix(step, "line ") {
				cancel()
			}
			return nil
		}))
		cart := []inventory.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}}
		require.ErrorIs(t, m.Reserve(ctx, "h1", cart, time.Minute), context.Canceled)
		segment.SetRedisHook(nil)
		ctx = context.Background()
		require.Eventually(t, func() bool {
			return errors.Is(m.Confirm(ctx, "h1"), inventory.ErrHoldNotFound)
		}, time.Second, 5*time.Millisecond, "the cut Reserve is unwound: no hold left")
		levels(t, ctx, m, "a", 10, 0)
		levels(t, ctx, m, "b", 10, 0)
		require.NoError(t, m.Reserve(ctx, "h1", cart, time.Minute), "the cancelled Reserve left its id free")
		levels(t, ctx, m, "a", 8, 2)
	})
}

// TestRedisStaleAttemptTakenOver: a keyed ReduceLines cut midway is
// taken over, once LinesTTL passed and before any Sweep, by a call with
// the same key and other lines: the cut attempt's lines come back, and the
// new call takes effect.
func TestRedisStaleAttemptTakenOver(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := twoSKUs(t, c, 200*time.Millisecond, 100*time.Millisecond)
		key := inventory.WithKey("cart-1")
		crashAt(t, "line ", 0)
		require.Error(t, m.ReduceLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}}, key))
		segment.SetRedisHook(nil)
		levels(t, ctx, m, "a", 9, 0)
		time.Sleep(250 * time.Millisecond)
		require.NoError(t, m.ReduceLines(ctx, []inventory.Line{{SKU: "b", Qty: 2}, {SKU: "a", Qty: 3}}, key))
		levels(t, ctx, m, "a", 7, 0)
		levels(t, ctx, m, "b", 8, 0)
		_, err := m.Sweep(ctx)
		require.NoError(t, err)
		levels(t, ctx, m, "a", 7, 0)
		levels(t, ctx, m, "b", 8, 0)
	})
}

// TestRedisOrdersWithReplicas: with WithReplicas(1, ...) on the shared
// Redis and its one replica, orders work and the replica has the hold's
// record; asking for two replicas makes a Reserve fail with
// rediskeys.ErrReplicas, outcome unknown, and the retry with the same id
// and lines through the Manager asking for one takes it over and holds
// the lines once.
func TestRedisOrdersWithReplicas(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	r := testenv.RedisReplica(t, c)
	one, prefix := newRedis(t, c, "", segment.WithReplicas(1, 5*time.Second))
	two, _ := newRedis(t, c, prefix, segment.WithReplicas(2, 100*time.Millisecond))
	require.NoError(t, one.Init(ctx, "a", 10))
	require.NoError(t, one.Init(ctx, "b", 10))
	cart := []inventory.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 3}}

	require.NoError(t, one.Reserve(ctx, "h1", cart, time.Minute))
	keys, err := r.Keys(ctx, prefix+"*:r:h:h1").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "the hold's record is on the replica")
	require.NoError(t, one.Confirm(ctx, "h1"))
	require.NoError(t, one.ReduceLines(ctx, cart, inventory.WithKey("k1")))
	levels(t, ctx, one, "a", 6, 0)
	levels(t, ctx, one, "b", 4, 0)

	err = two.Reserve(ctx, "h2", cart, time.Minute)
	require.ErrorIs(t, err, rediskeys.ErrReplicas)
	require.NoError(t, one.Reserve(ctx, "h2", cart, time.Minute), "the retry takes the attempt over")
	levels(t, ctx, one, "a", 4, 2)
	levels(t, ctx, one, "b", 1, 3)
	require.NoError(t, one.Cancel(ctx, "h2"))
	levels(t, ctx, one, "a", 6, 0)
	levels(t, ctx, one, "b", 4, 0)
}

// TestRedisShortKeyTTLCrash: with a key TTL far shorter than LinesTTL,
// the lines of a call cut midway are still given back by Sweep: their
// records live as long as an attempt may, whatever the key TTL.
func TestRedisShortKeyTTLCrash(t *testing.T) {
	redisClients(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := twoSKUs(t, c, 200*time.Millisecond, 100*time.Millisecond, segment.WithKeyTTL(time.Millisecond))
		crashAt(t, "line ", 1)
		require.Error(t, m.ReduceLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}))
		segment.SetRedisHook(nil)
		levels(t, ctx, m, "a", 9, 0)
		levels(t, ctx, m, "b", 8, 0)
		time.Sleep(250 * time.Millisecond)
		_, err := m.Sweep(ctx)
		require.NoError(t, err)
		levels(t, ctx, m, "a", 10, 0)
		levels(t, ctx, m, "b", 10, 0)
	})
}

// TestRedisHeldLinesSpread: on the Cluster, the lines of holds on one SKU
// land on the segments of their keys, over the masters, and a hold larger
// than any segment borrows: 100 holds of one unit and one of 20 on 8
// segments of 140 units, then every hold cancelled, leave the SKU whole.
func TestRedisHeldLinesSpread(t *testing.T) {
	c := testenv.RedisCluster(t)
	ctx := context.Background()
	m, _ := newRedis(t, c, "")
	require.NoError(t, m.Init(ctx, "hot", 140))
	ids := []string{"big"}
	require.NoError(t, m.Reserve(ctx, "big", []inventory.Line{{SKU: "hot", Qty: 20}}, time.Minute))
	for i := range 100 {
		id := fmt.Sprintf("h%d", i)
		ids = append(ids, id)
		require.NoError(t, m.Reserve(ctx, id, []inventory.Line{{SKU: "hot", Qty: 1}}, time.Minute))
	}
	levels(t, ctx, m, "hot", 20, 120)
	seen := 0
	for i := range segment.DefaultSegments {
		h, err := c.HGet(ctx, m.SegKey("hot", i), "h").Int64()
		if err == nil && h > 0 {
			seen++
		}
	}
	require.GreaterOrEqual(t, seen, segment.DefaultSegments/2, "segments holding lines")
	for _, id := range ids {
		require.NoError(t, m.Cancel(ctx, id))
	}
	levels(t, ctx, m, "hot", 140, 0)
}
