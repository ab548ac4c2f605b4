package segment_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/segment"
)

// TestRedisWithReplicas: with WithReplicas(1, ...) on the shared Redis,
// whose one replica scripts/services.sh starts on 6390, the replica has
// every acknowledged move, a borrow's included; asking for two replicas
// can only fall short, an error that is no sentinel, after Redis applied
// the write: a keyed move is then on the primary (its retry ErrDuplicate),
// and a borrow stopped at its first transfer is settled by Recover as not
// taken (its retry takes effect once).
func TestRedisWithReplicas(t *testing.T) {
	ctx := bounded(t, time.Minute)
	c := testenv.Redis(t)
	r := testenv.RedisReplica(t, c)

	one, prefix := newRedis(t, c, "", segment.WithReplicas(1, 5*time.Second))
	two, _ := newRedis(t, c, prefix, segment.WithReplicas(2, 100*time.Millisecond))
	// onReplica is the SKU's stock on the replica: a + o over its segments.
	onReplica := func(sku string) int64 {
		var sum int64
		for i := range segment.DefaultSegments {
			f, err := r.HMGet(ctx, one.SegKey(sku, i), "a", "o").Result()
			require.NoError(t, err)
			for _, v := range f {
				if s, ok := v.(string); ok {
					n, err := strconv.ParseInt(s, 10, 64)
					require.NoError(t, err)
					sum += n
				}
			}
		}
		return sum
	}

	const sku = "shoe"
	require.NoError(t, one.Init(ctx, sku, 16)) // 2 a segment
	require.EqualValues(t, 16, onReplica(sku), "Init returned after the replica had every segment")
	for _, c := range []struct {
		key string
		qty int64
	}{{"", 1}, {"buyer-1", 1}, {"buyer-2", 5}} { // 5 borrows
		var opts []inventory.Option
		if c.key != "" {
			opts = append(opts, inventory.WithKey(c.key))
		}
		left, err := one.Reduce(ctx, sku, c.qty, opts...)
		require.NoError(t, err)
		// A borrow's settling at its sources does not wait: their units
		// out in transfers reach the replica a moment later.
		require.Eventually(t, func() bool { return onReplica(sku) == left }, 5*time.Second, 10*time.Millisecond,
			"key %q: left %d", c.key, left)
	}
	_, err := one.Reduce(ctx, sku, 1, inventory.WithKey("buyer-1"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	_, err = one.Reduce(ctx, sku, 100)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock, "a refusal writes nothing: no wait, no error")

	notSentinel := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, rediskeys.ErrReplicas, "one replica cannot acknowledge for two")
		for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate, inventory.ErrInvalidArgument} {
			require.NotErrorIs(t, err, s)
		}
	}
	// A fresh SKU, 2 units a segment: the key's home fits the Reduce,
	// which takes no borrow (the borrows above drained segments at random).
	require.NoError(t, one.Init(ctx, "cap", 16))
	_, err = two.Reduce(ctx, "cap", 1, inventory.WithKey("buyer-3"))
	notSentinel(err)
	after, err := one.Get(ctx, "cap")
	require.NoError(t, err)
	require.EqualValues(t, 15, after, "the move is on the primary: the outcome was unknown, not nothing")
	_, err = one.Reduce(ctx, "cap", 1, inventory.WithKey("buyer-3"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry is safe")
	notSentinel(two.Init(ctx, "boot", 8))

	// A borrow: its first transfer leaves its source short of replicas,
	// is aborted (short too), and waits, pending, for a recovery.
	require.NoError(t, one.Init(ctx, "hat", 16))
	_, err = two.Reduce(ctx, "hat", 5, inventory.WithKey("buyer-4"))
	notSentinel(err)
	n, err := one.Recover(ctx, "hat")
	require.NoError(t, err)
	require.Equal(t, 1, n, "one transfer was pending")
	left, err := one.Get(ctx, "hat")
	require.NoError(t, err)
	require.EqualValues(t, 16, left, "the stopped borrow took nothing")
	left, err = one.Reduce(ctx, "hat", 5, inventory.WithKey("buyer-4"))
	require.NoError(t, err, "the retry takes effect, once")
	require.EqualValues(t, 11, left)

	for _, bad := range []segment.Option{segment.WithReplicas(0, time.Second), segment.WithReplicas(1, 0)} {
		_, err := segment.NewRedis(c, bad)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
	_, err = segment.New(testenv.SQLite(t), segment.WithReplicas(1, time.Second))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "New is SQL's")
}
