package luascript

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestResendWindow drives the script as copies of old calls would arrive:
// the window holds at most WindowSize slots however many calls were made,
// a copy of a call still in it is answered without moving stock, and a copy
// of a call that fell out of it is refused, never applied.
func TestResendWindow(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	m, err := New(c, WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	require.NotNil(t, m.caller, "a default client resends")
	const sku, calls = "shoe", 2*rediskeys.WindowSize + 7
	var window string
	for window == "" { // all calls in one minute, so in one window
		m.caller = rediskeys.NewCaller()
		epoch := time.Now().Unix() / 60
		require.NoError(t, m.Init(ctx, sku, 10_000))
		for range calls {
			_, err := m.Reduce(ctx, sku, 1)
			require.NoError(t, err)
		}
		if time.Now().Unix()/60 == epoch {
			window = rediskeys.Window(m.prefix, sku, m.caller.ID, epoch)
		}
	}
	n, err := c.StrLen(ctx, window).Result()
	require.NoError(t, err)
	require.EqualValues(t, (rediskeys.WindowSize*63+7)/8, n, "the ring of 63-bit slots does not grow")
	ttl, err := c.PTTL(ctx, window).Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, rediskeys.WindowTTL)

	copyOf := func(seq int) (string, int64) {
		t.Helper()
		keys := []string{rediskeys.Stock(m.prefix, sku), window, rediskeys.HoldMarker(m.prefix, sku)}
		res, _, err := m.run(ctx, keys, []any{"reduce", 1, inventory.MaxStock, m.keyTTL.Milliseconds(),
			"window", strconv.Itoa(seq), rediskeys.WindowSize, rediskeys.WindowTTL.Milliseconds()})
		require.NoError(t, err)
		status, rem, err := parseReply(res)
		require.NoError(t, err)
		return status, rem
	}
	status, rem := copyOf(calls) // the last call, sent again
	require.Equal(t, "ok", status)
	require.EqualValues(t, 10_000-calls, rem, "answered with the stock as it is")
	status, _ = copyOf(calls - rediskeys.WindowSize + 1) // the oldest still in the window
	require.Equal(t, "ok", status)
	for _, seq := range []int{1, calls - rediskeys.WindowSize} {
		status, _ = copyOf(seq)
		require.Equal(t, "stale", status, "seq %d fell out of the window", seq)
	}
	got, err := m.Get(ctx, sku)
	require.NoError(t, err)
	require.EqualValues(t, 10_000-calls, got, "no copy moved stock")
}
