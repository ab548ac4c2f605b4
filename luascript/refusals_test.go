package luascript_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// TestRefusals checks WithRefusals: once Redis refused a Reduce, the
// Reduces that cannot fit the stock it saw are refused with no script call
// until the TTL passes; units another Manager adds may be refused for at
// most that TTL, units this Manager adds at once end the refusals, a
// Reduce that fits the stock seen still goes to Redis, keyed calls always
// do, and nothing is ever sold that Redis did not sell.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	var s scripts
	c := counted(t, &s)
	prefix := testenv.RedisPrefix(t, c)
	const ttl = time.Second
	m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithRefusals(ttl))
	require.NoError(t, err)
	other, err := luascript.New(testenv.Redis(t), luascript.WithPrefix(prefix))
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
	_, err = m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.NoError(t, err, "a keyed call goes to Redis")
	left, err := m.Reduce(ctx, "shoe", 2)
	require.NoError(t, err, "a Reduce that fits the stock seen goes to Redis")
	require.Zero(t, left)
	_, err = m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "a keyed repeat is told it took effect")

	// Sold out: refused locally. Another Manager adds units: they may be
	// refused, but not past the TTL after Redis was last asked.
	sending := time.Now()
	_, err = m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	asked := time.Now()
	_, err = other.Return(ctx, "shoe", 10)
	require.NoError(t, err)
	before = calls()
	for time.Since(sending) < ttl/2 { // the refusal was seen after sending
		_, err = m.Reduce(ctx, "shoe", 1)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock, "stale, within the TTL")
	}
	require.Equal(t, before, calls())
	time.Sleep(ttl - time.Since(asked) + 10*time.Millisecond)
	left, err = m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err, "past the TTL, Redis is asked again")
	require.EqualValues(t, 9, left)

	// This Manager's own Return ends the refusals at once.
	_, err = m.Reduce(ctx, "shoe", 100)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Return(ctx, "shoe", 91, inventory.WithKey("refund"))
	require.NoError(t, err)
	left, err = m.Reduce(ctx, "shoe", 100)
	require.NoError(t, err, "its own Return: refusals end")
	require.Zero(t, left)
	_, err = m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.NoError(t, m.Init(ctx, "shoe", 1))
	_, err = m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err, "its own Init: refusals end")

	for _, bad := range []time.Duration{0, -time.Second, luascript.MaxRefusalTTL + 1} {
		_, err := luascript.New(c, luascript.WithRefusals(bad))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, bad)
	}
}

// TestRefusalsNeverSellTooMuch runs a sale with Returns from another
// Manager beside it: the local refusals never make a sale that the stock
// did not allow (Redis decides every sale), and the refused calls far
// outnumber the script calls.
func TestRefusalsNeverSellTooMuch(t *testing.T) {
	ctx := context.Background()
	var s scripts
	c := counted(t, &s)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithRefusals(5*time.Millisecond))
	require.NoError(t, err)
	other, err := luascript.New(testenv.Redis(t), luascript.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "hot", 50))
	const buyers, tries = 64, 200
	var mu sync.Mutex
	sold, returned := 0, 0
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tries {
				_, err := m.Reduce(ctx, "hot", 1)
				if err == nil {
					mu.Lock()
					sold++
					mu.Unlock()
				} else {
					require.ErrorIs(t, err, inventory.ErrInsufficientStock)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			time.Sleep(2 * time.Millisecond)
			_, err := other.Return(ctx, "hot", 1)
			require.NoError(t, err)
			mu.Lock()
			returned++
			mu.Unlock()
		}
	}()
	wg.Wait()
	left, err := m.Get(ctx, "hot")
	require.NoError(t, err)
	require.EqualValues(t, 50+returned-sold, left)
	require.GreaterOrEqual(t, left, int64(0))
	single, batches := s.counts()
	require.Less(t, single+len(batches), buyers*tries/2, "most refusals made no round trip")
}
