package luascript_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/refusals/refusalstest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// TestRefusals checks WithRefusals from outside (refusalstest.Run): stale
// refusals for at most the TTL, a Manager's own Return and Init end them,
// keyed calls always reach Redis, and nothing is sold that Redis did not
// sell.
func TestRefusals(t *testing.T) {
	c := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithRefusals(300*time.Millisecond))
	require.NoError(t, err)
	plain, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	refusalstest.Run(t, m, plain, "shoe", 300*time.Millisecond)

	for _, bad := range []time.Duration{0, -time.Second, luascript.MaxRefusalTTL + 1} {
		_, err := luascript.New(c, luascript.WithRefusals(bad))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, bad)
	}
}

// TestRefusalsMakeNoScriptCall counts the script calls: once Redis refused
// a Reduce, the Reduces that cannot fit the stock it saw cost none, in a
// sale too, where most refusals made no round trip.
func TestRefusalsMakeNoScriptCall(t *testing.T) {
	ctx := context.Background()
	var s scripts
	c := counted(t, &s)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithRefusals(time.Second))
	require.NoError(t, err)
	calls := func() int { n, b := s.counts(); return n + len(b) }

	require.NoError(t, m.Init(ctx, "shoe", 3))
	_, err = m.Reduce(ctx, "shoe", 5)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock, "Redis refuses")
	before := calls()
	for range 100 {
		left, err := m.Reduce(ctx, "shoe", 4)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
		require.EqualValues(t, 3, left, "the stock seen")
	}
	require.Equal(t, before, calls(), "refused with no round trip")

	short, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithRefusals(5*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, short.Init(ctx, "hot", 50))
	const buyers, tries = 64, 200
	before = calls()
	var wg sync.WaitGroup
	for range buyers {
		wg.Go(func() {
			for range tries {
				if _, err := short.Reduce(ctx, "hot", 1); err != nil {
					require.ErrorIs(t, err, inventory.ErrInsufficientStock)
				}
			}
		})
	}
	wg.Wait()
	require.Less(t, calls()-before, buyers*tries/2, "most refusals made no round trip")
}
