package luascript_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/merge/mergetest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// scripts counts the script calls a client sends, and the calls merged
// into each: a batch.lua call has 1+3n arguments for n calls, a move.lua
// call 1 or 2.
type scripts struct {
	mu      sync.Mutex
	single  int
	batches []int // calls per batch
}

func (s *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			argv := len(a) - 3 - int(a[2].(int))
			s.mu.Lock()
			if argv <= 2 {
				s.single++
			} else {
				s.batches = append(s.batches, (argv-1)/3)
			}
			s.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (s *scripts) counts() (single int, batches []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.single, slices.Clone(s.batches)
}

// concurrently runs f(w, i) for each of calls calls i in each of workers
// goroutines w, and returns when all are done.
func concurrently(workers, calls int, f func(w, i int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				f(w, i)
			}
		}()
	}
	wg.Wait()
}

// counted returns a client of the standalone Redis whose script calls s
// counts.
func counted(t *testing.T, s *scripts) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Options().Addr, PoolSize: 64, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	c.AddHook(s)
	return c
}

// TestMergedCallsGetTheirOwnAnswers runs many buyers of one unit each, half
// of them sharing their key with another buyer, on little stock: every
// success has its own remaining value (together exactly 0..stock-1), the
// calls that no longer fit get ErrInsufficientStock, the repeats of a key
// that sold get ErrDuplicate with the first call's remaining, and the calls
// were merged (fewer script calls than calls, none over the bound).
func TestMergedCallsGetTheirOwnAnswers(t *testing.T) {
	ctx := context.Background()
	var s scripts
	c := counted(t, &s)
	const buyers, stock, maxBatch = 600, 150, 16
	m := newManager(t, c, luascript.WithMaxBatch(maxBatch))
	require.NoError(t, m.Init(ctx, "hot", stock))
	answers := mergetest.Buyers(buyers, func(key string) (int64, error) {
		return m.Reduce(ctx, "hot", 1, inventory.WithKey(key))
	})
	mergetest.CheckAnswers(t, stock, answers)
	left, err := m.Get(ctx, "hot")
	require.NoError(t, err)
	require.Zero(t, left)
	single, batches := s.counts()
	mergetest.CheckMerged(t, buyers, single, batches, maxBatch)
}

// TestMergedMixedMoves merges Reduces and Returns of several quantities,
// with and without keys, and checks the invariant on the stock.
func TestMergedMixedMoves(t *testing.T) {
	ctx := context.Background()
	var s scripts
	m := newManager(t, counted(t, &s))
	const workers, calls = 64, 50
	require.NoError(t, m.Init(ctx, "mix", 100))
	var net atomic.Int64
	concurrently(workers, calls, func(w, i int) {
		qty := int64(1 + (w+i)%5)
		var opts []inventory.Option
		if i%3 == 0 {
			opts = append(opts, inventory.WithKey(fmt.Sprint(w, "-", i)))
		}
		if (w+i)%2 == 0 {
			if _, err := m.Return(ctx, "mix", qty, opts...); err == nil {
				net.Add(qty)
			} else {
				require.NoError(t, err)
			}
		} else if _, err := m.Reduce(ctx, "mix", qty, opts...); err == nil {
			net.Add(-qty)
		} else if !errors.Is(err, inventory.ErrInsufficientStock) {
			require.NoError(t, err)
		}
	})
	left, err := m.Get(ctx, "mix")
	require.NoError(t, err)
	require.Equal(t, 100+net.Load(), left)
	require.GreaterOrEqual(t, left, int64(0))
	_, batches := s.counts()
	require.NotEmpty(t, batches)
}

// TestLoneCallsAreNotMerged checks that calls one after another each go to
// Redis at once, as their own script call.
func TestLoneCallsAreNotMerged(t *testing.T) {
	ctx := context.Background()
	var s scripts
	m := newManager(t, counted(t, &s))
	require.NoError(t, m.Init(ctx, "shoe", 100))
	mergetest.CheckLoneCalls(t, 50, 40, func(key string) error {
		_, err := m.Reduce(ctx, "shoe", 1, inventory.WithKey(key))
		return err
	}, s.counts)
}

// TestMergedContext stalls Redis's replies: a call queued behind the call
// in flight leaves the queue when its ctx ends, within DeadlineSlack,
// having taken nothing; a call whose ctx ends after its batch was sent
// returns at its deadline too, its outcome unknown, and its keyed retry
// reports ErrDuplicate.
func TestMergedContext(t *testing.T) {
	ctx := context.Background()
	direct := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, direct)
	p := newCutter(t, direct.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 10))
	_, err = m.Reduce(ctx, "shoe", 1) // loads the script
	require.NoError(t, err)

	const stall = 400 * time.Millisecond
	p.stall.Store(int64(stall))
	inFlight := make(chan error, 1)
	launched := time.Now()
	go func() { _, err := m.Reduce(ctx, "shoe", 1); inFlight <- err }()
	time.Sleep(50 * time.Millisecond) // the call is in flight, stalled

	// Queued: leaves unsent when its ctx ends.
	_, err = faulttest.CheckLate(t, "queued call", 100*time.Millisecond, func(ctx context.Context) error {
		_, err := m.Reduce(ctx, "shoe", 5, inventory.WithKey("queued"))
		return err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Queued, then sent in the next batch (stalled too), then its ctx ends.
	// That batch leaves when the call in flight's reply comes back, about
	// launched+stall, and its own reply about launched+2*stall: the ctx
	// ends halfway, at launched+1.5*stall, whenever this goroutine starts
	// (a timeout counted from here ended the ctx 50 ms before the batch's
	// reply came back, and a start that slipped 50 ms under load let the
	// call finish).
	sent := make(chan error, 1)
	go func() {
		_, err := faulttest.CheckLate(t, "sent call", time.Until(launched.Add(stall+stall/2)), func(ctx context.Context) error {
			_, err := m.Reduce(ctx, "shoe", 2, inventory.WithKey("sent"))
			return err
		})
		sent <- err
	}()
	time.Sleep(20 * time.Millisecond) // the keyed call queues first
	// A second call, so that the next batch merges two.
	go func() {
		_, err := m.Reduce(context.Background(), "shoe", 1)
		sent <- err
	}()
	require.NoError(t, <-inFlight)
	var errs []error
	for range 2 {
		errs = append(errs, <-sent)
	}
	p.stall.Store(0)
	var unknown int
	for _, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			unknown++
		}
	}
	require.Equal(t, 1, unknown, "the keyed call timed out after it was sent: %v", errs)
	require.Eventually(t, func() bool {
		n, err := m.Get(ctx, "shoe")
		return err == nil && n == 10-1-1-2-1
	}, 5*time.Second, 10*time.Millisecond, "the sent batch ran; the queued call took nothing")
	left, err := m.Reduce(ctx, "shoe", 2, inventory.WithKey("sent"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the retry of the call sent finds it")
	require.EqualValues(t, 6, left, "it ran first in its batch")
	left, err = m.Reduce(ctx, "shoe", 5, inventory.WithKey("queued"))
	require.NoError(t, err, "the call that left the queue never ran")
	require.EqualValues(t, 0, left)
}

// sameSlot returns two SKUs whose keys share a Cluster slot.
func sameSlot(t *testing.T) (string, string) {
	seen := map[int]string{}
	for i := 0; ; i++ {
		sku := fmt.Sprint("slot-sku-", i)
		if other, ok := seen[rediskeys.Slot(sku)]; ok {
			return other, sku
		}
		seen[rediskeys.Slot(sku)] = sku
	}
}

// TestMergedAcrossSKUsOfOneSlot merges the calls of two SKUs that share a
// Cluster slot, on the Cluster, one of them holding no number: its calls
// fail, the other SKU's calls are answered, and their stock is right.
func TestMergedAcrossSKUsOfOneSlot(t *testing.T) {
	ctx := context.Background()
	cc := testenv.RedisCluster(t)
	prefix := testenv.RedisPrefix(t, cc)
	var s scripts
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cc.Options().Addrs, PoolSize: 64, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	c.AddHook(&s)
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	a, b := sameSlot(t)
	require.NoError(t, m.Init(ctx, a, 1000))
	require.NoError(t, cc.Set(ctx, rediskeys.Stock(prefix, b), "lots", 0).Err())
	const workers, calls = 32, 20
	var sold atomic.Int64
	concurrently(workers, calls, func(w, i int) {
		if (w+i)%2 == 0 {
			_, err := m.Reduce(ctx, a, 1)
			require.NoError(t, err)
			sold.Add(1)
		} else {
			_, err := m.Reduce(ctx, b, 1)
			require.ErrorContains(t, err, "does not hold a number")
		}
	})
	left, err := m.Get(ctx, a)
	require.NoError(t, err)
	require.Equal(t, 1000-sold.Load(), left)
	_, batches := s.counts()
	require.NotEmpty(t, batches, "calls of the two SKUs were merged")
}

// TestRedirectsStillFollowed gives a Cluster client a slot map that puts
// every slot on one node: the other nodes answer MOVED, which proves the
// script did not run, and the call must still be redirected, not refused.
func TestRedirectsStillFollowed(t *testing.T) {
	ctx := context.Background()
	cc := testenv.RedisCluster(t)
	prefix := testenv.RedisPrefix(t, cc)
	addrs := cc.Options().Addrs
	c := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: rediskeys.Slots - 1, Nodes: []redis.ClusterNode{{Addr: addrs[0]}}}}, nil
		},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	for _, batch := range []int{1, luascript.DefaultMaxBatch} {
		m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithMaxBatch(batch))
		require.NoError(t, err)
		for i := range 20 {
			sku := fmt.Sprint("moved-", batch, "-", i)
			require.NoError(t, cc.Set(ctx, rediskeys.Stock(prefix, sku), 5, 0).Err())
			left, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
			require.NoError(t, err, sku)
			require.EqualValues(t, 4, left)
		}
	}
}

// TestWithMaxBatch checks the option's range: 1..MaxBatch.
func TestWithMaxBatch(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, n := range []int{1, 2, luascript.DefaultMaxBatch, luascript.MaxBatch} {
		_, err := luascript.New(c, luascript.WithMaxBatch(n))
		require.NoError(t, err, n)
	}
	for _, n := range []int{-1, 0, luascript.MaxBatch + 1} {
		_, err := luascript.New(c, luascript.WithMaxBatch(n))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, n)
	}
}

// TestRingMergesOneSKUPerBatch runs, on a Ring of two shards (which shards
// by hash tag, not by slot), calls on two SKUs of one Cluster slot that
// live on different shards: a batch must hold one SKU's calls only, or
// its script would run on the wrong shard.
func TestRingMergesOneSKUPerBatch(t *testing.T) {
	ctx := context.Background()
	nodes := testenv.RedlockClients(t)[:2]
	prefix := testenv.Prefix()
	t.Cleanup(func() {
		for _, n := range nodes {
			testenv.DeleteKeys(t, n, prefix+"*")
		}
	})
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": nodes[0].Options().Addr, "b": nodes[1].Options().Addr},
		ContextTimeoutEnabled: true,
		PoolSize:              32,
	})
	t.Cleanup(func() { ring.Close() })
	m, err := luascript.New(ring, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	shard := func(sku string) int {
		for i, n := range nodes {
			if n.Exists(ctx, rediskeys.Stock(prefix, sku)).Val() == 1 {
				return i
			}
		}
		return -1
	}
	var a, b string
	seen := map[int]string{}
	for i := 0; a == ""; i++ {
		sku := fmt.Sprint("ring-", i)
		other, ok := seen[rediskeys.Slot(sku)]
		if !ok {
			seen[rediskeys.Slot(sku)] = sku
			continue
		}
		require.NoError(t, m.Init(ctx, sku, 1000))
		require.NoError(t, m.Init(ctx, other, 1000))
		if shard(sku) != shard(other) {
			a, b = other, sku
		}
	}
	const workers, calls = 32, 20
	var sold [2]atomic.Int64
	concurrently(workers, calls, func(w, i int) {
		j := (w + i) % 2
		_, err := m.Reduce(ctx, []string{a, b}[j], 1)
		require.NoError(t, err)
		sold[j].Add(1)
	})
	for j, sku := range []string{a, b} {
		left, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.Equal(t, 1000-sold[j].Load(), left, sku)
	}
}

// TestMergedExactNearMaxStock merges keyed Reduces of stock near MaxStock
// (2^53-1), where a double formatted by Lua's tostring (%.14g) loses
// digits: the stock batch.lua leaves, each call's remaining and the
// remaining its key recorded (which a repeat returns) must be exact.
func TestMergedExactNearMaxStock(t *testing.T) {
	ctx := context.Background()
	var s scripts
	m := newManager(t, counted(t, &s))
	const workers, calls, start = 64, 20, inventory.MaxStock - 1000
	require.NoError(t, m.Init(ctx, "big", start))
	var taken atomic.Int64
	left := make([][]int64, workers)
	concurrently(workers, calls, func(w, i int) {
		n, err := m.Reduce(ctx, "big", 1+int64(w+i)%3, inventory.WithKey(fmt.Sprint(w, "-", i)))
		require.NoError(t, err)
		taken.Add(1 + int64(w+i)%3)
		left[w] = append(left[w], n)
	})
	got, err := m.Get(ctx, "big")
	require.NoError(t, err)
	require.Equal(t, start-taken.Load(), got)
	seen := map[int64]bool{}
	concurrently(workers, calls, func(w, i int) {
		n, err := m.Reduce(ctx, "big", 1, inventory.WithKey(fmt.Sprint(w, "-", i)))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.Equal(t, left[w][i], n, "the repeat of %d-%d gets the remaining its first call got", w, i)
	})
	for _, l := range left {
		for _, n := range l {
			require.False(t, seen[n], "remaining %d returned twice", n)
			seen[n] = true
		}
	}
	_, batches := s.counts()
	require.NotEmpty(t, batches)
}
