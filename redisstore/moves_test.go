package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/redisstore"
)

// The movement ledger (WithLedger), not the idempotency keys
// (TestIdempotencyKeys).

// TestMovesOff: a Store without WithLedger writes no stream, whatever it
// moves, and its Entries fail with ledger.ErrNotKept.
func TestMovesOff(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, prefix := newStore(t, c)
		require.False(t, s.KeepsLedger())
		moveAll(t, ctx, s, "shoe")
		keys := scan(t, ctx, c, prefix+"*")
		require.NotEmpty(t, keys)
		for _, k := range keys {
			require.NotContains(t, k, ":l:", "no stream without WithLedger")
		}
		_, err := s.Entries(ctx, "shoe", 0, 1)
		require.ErrorIs(t, err, ledger.ErrNotKept)
	})
}

// TestMoves: every write of a Store WithLedger records its entry, in the
// same script; without a Manager's Note, what the write says.
func TestMoves(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newStore(t, c, redisstore.WithLedger(0))
		require.True(t, s.KeepsLedger())
		moveAll(t, ctx, s, "shoe")
		es, err := s.Entries(ctx, "shoe", 0, ledger.MaxPage)
		require.NoError(t, err)
		var got []string
		for _, e := range es {
			got = append(got, string(e.Kind)+" "+e.Key+" "+e.Hold)
		}
		require.Equal(t, []string{"init  ", "reduce k ", "reserve  h:1", "cancel  h:1", "reserve  h:2", "confirm  h:2", "return  "}, got)
		st, err := ledger.Replay(ledger.History(ctx, s, "shoe", 0))
		require.NoError(t, err)
		require.Equal(t, ledger.Stock{Available: 9, Sold: 1}, st)
		// A Note in ctx is what the entry records.
		ok, err := s.CompareAndSet(lockmgr.WithNote(ctx, lockmgr.Note{Kind: ledger.Reduce, Units: 1, Ref: "noted"}), "shoe", 9, 8, driver.DirReduce, "")
		require.NoError(t, err)
		require.True(t, ok)
		es, err = s.Entries(ctx, "shoe", es[len(es)-1].Pos, 10)
		require.NoError(t, err)
		require.Len(t, es, 1)
		require.Equal(t, "noted", es[0].Ref)
	})
}

// moveAll makes every kind of write on sku, straight on the Store: Init
// 10, a keyed compare-and-set to 9, a hold of 1 cancelled, a hold of 1
// sold, a return of 1: 9 left, 1 sold.
func moveAll(t *testing.T, ctx context.Context, s *redisstore.Store, sku string) {
	t.Helper()
	require.NoError(t, s.Init(ctx, sku, 10))
	ok, err := s.CompareAndSet(ctx, sku, 10, 9, driver.DirReduce, "k")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.CompareAndSet(ctx, sku, 10, 8, driver.DirReduce, "")
	require.NoError(t, err)
	require.False(t, ok, "a lost compare records nothing")
	later := time.Now().Add(time.Hour)
	ok, err = s.Hold(ctx, sku, 9, 8, "h:1", 1, later)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = s.Unhold(ctx, sku, "h:1", false)
	require.NoError(t, err)
	ok, err = s.Hold(ctx, sku, 9, 8, "h:2", 1, later)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = s.Unhold(ctx, sku, "h:2", true)
	require.NoError(t, err)
	n, err := s.Unhold(ctx, sku, "h:2", true)
	require.NoError(t, err)
	require.Zero(t, n, "no line, no entry")
	ok, err = s.CompareAndSet(ctx, sku, 8, 9, driver.DirReturn, "")
	require.NoError(t, err)
	require.True(t, ok)
}

func scan(t *testing.T, ctx context.Context, c redis.UniversalClient, match string) []string {
	t.Helper()
	var keys []string
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex // the masters are asked at once
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			ks, err := n.Keys(ctx, match).Result()
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, ks...)
			return err
		}))
		return keys
	}
	keys, err := c.Keys(ctx, match).Result()
	require.NoError(t, err)
	return keys
}

// TestMovesShareLuascriptStream: luascript's ledger and the Store's are
// one stream, in one layout: moves by both replay as one history.
func TestMovesShareLuascriptStream(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		s, prefix := newStore(t, c, redisstore.WithLedger(0))
		lm, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithLedger(0))
		require.NoError(t, err)
		const sku = "a{b}c"
		require.NoError(t, lm.Init(ctx, sku, 10))
		_, err = lm.Reduce(ctx, sku, 3, inventory.WithKey("k"), inventory.WithRef("by luascript"))
		require.NoError(t, err)
		ok, err := s.CompareAndSet(ctx, sku, 7, 5, driver.DirReduce, "k2")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = lm.Return(ctx, sku, 1)
		require.NoError(t, err)
		for _, r := range []ledger.Reader{s, lm} {
			st, err := ledger.Check(ctx, r, lm, sku)
			require.NoError(t, err)
			require.Equal(t, ledger.Stock{Available: 6, Sold: 4}, st)
		}
		es, err := lm.Entries(ctx, sku, 0, 10)
		require.NoError(t, err)
		require.Len(t, es, 4)
		require.Equal(t, "k2", es[2].Key)
	})
}

func TestWithLedgerRefusesNegative(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	_, err := redisstore.New(c, redisstore.WithLedger(-1))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	s, err := redisstore.New(c, redisstore.WithLedger(0))
	require.NoError(t, err)
	for _, bad := range []struct {
		sku   string
		after int64
		limit int
	}{{"", 0, 1}, {"a", -1, 1}, {"a", 0, 0}, {"a", 0, ledger.MaxPage + 1}} {
		_, err := s.Entries(context.Background(), bad.sku, bad.after, bad.limit)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "before any I/O: the client has no server")
	}
}
