package luascript_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/luascript"
)

// TestLedgerOff: a Manager without WithLedger writes no stream and its
// Entries fails with ErrNotKept; WithLedger(-1) is refused.
func TestLedgerOff(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 10))
	_, err = m.Reduce(ctx, "shoe", 1, inventory.WithRef("order 1"))
	require.NoError(t, err)
	_, err = m.Entries(ctx, "shoe", 0, 10)
	require.ErrorIs(t, err, ledger.ErrNotKept)
	n, err := c.Exists(ctx, strings.Replace(rediskeys.Stock(prefix, "shoe"), "}:s:", "}:l:", 1)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "a stream without a ledger")
	_, err = luascript.New(c, luascript.WithLedger(-1))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
}

// TestLedgerTrimmed: WithLedger(n) keeps at least the last n entries (each
// call here is its own stream entry), which still read back with their
// counters, but no longer replay from zero.
func TestLedgerTrimmed(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, testenv.Redis(t), luascript.WithLedger(10), luascript.WithMaxBatch(1))
	require.NoError(t, m.Init(ctx, "shoe", 1000))
	const calls = 500
	for range calls {
		_, err := m.Reduce(ctx, "shoe", 1)
		require.NoError(t, err)
	}
	var kept []ledger.Entry
	for e, err := range ledger.History(ctx, m, "shoe", 0) {
		require.NoError(t, err)
		kept = append(kept, e)
	}
	require.GreaterOrEqual(t, len(kept), 10)
	require.Less(t, len(kept), calls, "trimmed")
	last := kept[len(kept)-1]
	require.Equal(t, ledger.Stock{Available: 1000 - calls, Sold: calls}, last.After)
	_, err := ledger.Check(ctx, m, m, "shoe")
	require.Error(t, err, "a trimmed history does not replay from zero")
}

// TestLedgerRuns: merged unkeyed calls with no reference are kept as runs
// of records (internal/redisledger's ledger.lua), and still read back as
// one entry per call that took effect, in order, replaying to the stock;
// Reduces and Returns of several sizes, some refused, some with a
// reference or a key, break the runs.
func TestLedgerRuns(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithLedger(0))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 600))
	faulttest.LedgerRuns(t, m, "shoe", 40, 30)
	msgs, err := c.XRange(ctx, strings.Replace(rediskeys.Stock(prefix, "shoe"), "}:s:", "}:l:", 1), "-", "+").Result()
	require.NoError(t, err)
	runs := 0
	for _, msg := range msgs {
		lines := strings.Split(msg.Values["e"].(string), "\n")
		for i := 1; i < len(lines); i += 4 {
			if len(strings.Fields(lines[i])) == 4 {
				runs++
			}
		}
	}
	require.Positive(t, runs, "runs of records in %d stream entries", len(msgs))
}
