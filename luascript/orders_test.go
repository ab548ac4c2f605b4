package luascript_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// servers runs f on the standalone Redis and on the Cluster.
func servers(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { f(t, testenv.Redis(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, testenv.RedisCluster(t)) })
}

// skus returns n SKUs named after name, in one Cluster slot when sameSlot,
// else in n different slots.
func skus(name string, n int, sameSlot bool) []string {
	var out []string
	seen := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		s := fmt.Sprintf("%s-%d", name, i)
		slot := rediskeys.Slot(s)
		switch {
		case sameSlot && len(out) > 0 && slot != rediskeys.Slot(out[0]):
			continue
		case !sameSlot && seen[slot]:
			continue
		}
		seen[slot] = true
		out = append(out, s)
	}
	return out
}

// eachLayout runs f on the standalone Redis and on the Cluster, each time
// with n SKUs named after name in one Cluster slot and in n slots
// (subtests oneSlot=true, oneSlot=false), each initialised to qty, on a
// Manager of its own made with opts.
func eachLayout(t *testing.T, name string, n int, qty int64, f func(t *testing.T, ctx context.Context, m *luascript.Manager, s []string), opts ...luascript.Option) {
	layouts(t, func(t *testing.T, c redis.UniversalClient, same bool) {
		m, s := layout(t, c, name, n, qty, same, opts...)
		f(t, context.Background(), m, s)
	})
}

// layouts runs f on the standalone Redis and on the Cluster, each time for
// SKUs in one Cluster slot and in several (subtests oneSlot=true,
// oneSlot=false).
func layouts(t *testing.T, f func(t *testing.T, c redis.UniversalClient, sameSlot bool)) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		for _, same := range []bool{true, false} {
			t.Run(fmt.Sprintf("oneSlot=%v", same), func(t *testing.T) { f(t, c, same) })
		}
	})
}

// layout makes a Manager of its own with opts, and n SKUs named after
// name, in one Cluster slot when sameSlot, else in n slots, each
// initialised to qty.
func layout(t *testing.T, c redis.UniversalClient, name string, n int, qty int64, sameSlot bool, opts ...luascript.Option) (*luascript.Manager, []string) {
	t.Helper()
	m := newManager(t, c, opts...)
	s := skus(name, n, sameSlot)
	for _, sku := range s {
		require.NoError(t, m.Init(context.Background(), sku, qty))
	}
	return m, s
}

type checker struct {
	t   *testing.T
	m   *luascript.Manager
	ctx context.Context
}

// stock checks available and held units of sku.
func (c checker) stock(sku string, avail, held int64) {
	c.t.Helper()
	n, err := c.m.Get(c.ctx, sku)
	require.NoError(c.t, err)
	require.Equal(c.t, avail, n, "available %s", sku)
	h, err := c.m.Held(c.ctx, sku)
	require.NoError(c.t, err)
	require.Equal(c.t, held, h, "held %s", sku)
}

func lines(skus []string, qty ...int64) []inventory.Line {
	var ls []inventory.Line
	for i, s := range skus {
		ls = append(ls, inventory.Line{SKU: s, Qty: qty[i]})
	}
	return ls
}

func TestLinesAllOrNothing(t *testing.T) {
	eachLayout(t, "lines", 3, 5, func(t *testing.T, ctx context.Context, m *luascript.Manager, s []string) {
		ck := checker{t, m, ctx}
		err := m.ReduceLines(ctx, lines(s, 2, 6, 1))
		var ie *inventory.InsufficientError
		require.ErrorAs(t, err, &ie)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock)
		require.Equal(t, []inventory.Shortfall{{Line: inventory.Line{SKU: s[1], Qty: 6}, Available: 5}}, ie.Short)
		for _, sku := range s {
			ck.stock(sku, 5, 0)
		}
		require.NoError(t, m.ReduceLines(ctx, lines(s, 2, 5, 1), inventory.WithKey("cart-1")))
		ck.stock(s[0], 3, 0)
		ck.stock(s[1], 0, 0)
		ck.stock(s[2], 4, 0)
		err = m.ReduceLines(ctx, lines(s, 1, 1, 1), inventory.WithKey("cart-1"))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.NoError(t, m.ReturnLines(ctx, lines(s, 1, 1, 1), inventory.WithKey("cart-1")),
			"keys are per direction")
		ck.stock(s[1], 1, 0)
		err = m.ReturnLines(ctx, lines(s, 1, inventory.MaxStock, 1))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "past MaxStock")
		ck.stock(s[0], 4, 0)
		err = m.ReduceLines(ctx, append(lines(s, 1, 1, 1), inventory.Line{SKU: "never-" + s[0], Qty: 1}))
		require.ErrorIs(t, err, inventory.ErrNotFound)
		ck.stock(s[0], 4, 0)
	})
}

func TestHoldLifecycle(t *testing.T) {
	eachLayout(t, "hold", 2, 10, func(t *testing.T, ctx context.Context, m *luascript.Manager, s []string) {
		ck := checker{t, m, ctx}
		require.NoError(t, m.Reserve(ctx, "o1", lines(s, 3, 4), time.Minute))
		ck.stock(s[0], 7, 3)
		ck.stock(s[1], 6, 4)
		require.ErrorIs(t, m.Reserve(ctx, "o1", lines(s, 1, 1), time.Minute), inventory.ErrDuplicate)
		var ie *inventory.InsufficientError
		require.ErrorAs(t, m.Reserve(ctx, "o2", lines(s, 1, 7), time.Minute), &ie)
		ck.stock(s[0], 7, 3)
		require.NoError(t, m.Confirm(ctx, "o1"))
		ck.stock(s[0], 7, 0)
		ck.stock(s[1], 6, 0)
		require.ErrorIs(t, m.Confirm(ctx, "o1"), inventory.ErrDuplicate)
		require.ErrorIs(t, m.Cancel(ctx, "o1"), inventory.ErrHoldConfirmed)
		ck.stock(s[0], 7, 0)

		require.NoError(t, m.Reserve(ctx, "o2", lines(s, 2, 2), time.Minute), "a refused Reserve leaves its id")
		require.NoError(t, m.Cancel(ctx, "o2"))
		ck.stock(s[0], 7, 0)
		ck.stock(s[1], 6, 0)
		require.NoError(t, m.Cancel(ctx, "o2"), "Cancel is idempotent")
		require.ErrorIs(t, m.Confirm(ctx, "o2"), inventory.ErrHoldReleased)
		require.ErrorIs(t, m.Reserve(ctx, "o2", lines(s, 1, 1), time.Minute), inventory.ErrDuplicate)
		require.ErrorIs(t, m.Confirm(ctx, "nobody"), inventory.ErrNotFound)
		require.ErrorIs(t, m.Cancel(ctx, "nobody"), inventory.ErrNotFound)
		_, err := m.Held(ctx, "never")
		require.ErrorIs(t, err, inventory.ErrNotFound)
	})
}

// TestExpiryWithTraffic: a hold past its TTL counts as held until a call
// that moves its SKU (a plain Reduce here) releases it in its own step.
// The hold lasts 50 ms, or longer when the first Reduce came too late to
// find it live.
func TestExpiryWithTraffic(t *testing.T) {
	layouts(t, func(t *testing.T, c redis.UniversalClient, same bool) {
		ctx := context.Background()
		testenv.TTLRounds(t, 50*time.Millisecond, 4*time.Second, func(ttl time.Duration) bool {
			m, s := layout(t, c, "expire", 2, 10, same)
			ck := checker{t, m, ctx}
			start := time.Now()
			require.NoError(t, m.Reserve(ctx, "o1", lines(s, 10, 10), ttl))
			_, err := m.Reduce(ctx, s[0], 1)
			if !testenv.Live(t, start, ttl, "the Reduce of held units") {
				return false
			}
			require.ErrorIs(t, err, inventory.ErrInsufficientStock, "held units are not available")
			time.Sleep(ttl + 70*time.Millisecond)
			ck.stock(s[0], 0, 10) // expired, not yet released
			left, err := m.Reduce(ctx, s[0], 1)
			require.NoError(t, err, "the Reduce released the expired hold first")
			require.EqualValues(t, 9, left)
			ck.stock(s[0], 9, 0)
			require.NoError(t, m.ReduceLines(ctx, lines(s[1:], 10)))
			ck.stock(s[1], 0, 0)
			require.ErrorIs(t, m.Confirm(ctx, "o1"), inventory.ErrHoldReleased)
			ck.stock(s[0], 9, 0)
			ck.stock(s[1], 0, 0)
			return true
		})
	})
}

// TestExpiryWithMergedCalls: concurrent Reduces, which the Manager merges
// into batches, release a SKU's expired hold in their step too.
func TestExpiryWithMergedCalls(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		m := newManager(t, c)
		require.NoError(t, m.Init(ctx, "shoe", 64))
		require.NoError(t, m.Reserve(ctx, "o1", lines([]string{"shoe"}, 64), 30*time.Millisecond))
		time.Sleep(60 * time.Millisecond)
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := m.Reduce(ctx, "shoe", 1); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		checker{t, m, ctx}.stock("shoe", 0, 0)
		require.ErrorIs(t, m.Confirm(ctx, "o1"), inventory.ErrHoldReleased)
	})
}

// TestExpiryIsRedisTime checks that the deadline the script stores is Redis
// TIME + ttl (the client's clock plays no part).
func TestExpiryIsRedisTime(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 1))
	before, err := c.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, m.Reserve(ctx, "o1", lines([]string{"shoe"}, 1), time.Hour))
	after, err := c.Time(ctx).Result()
	require.NoError(t, err)
	dl, err := c.HGet(ctx, rediskeys.Order(prefix, "h", "o1"), "dl").Int64()
	require.NoError(t, err)
	require.GreaterOrEqual(t, dl, before.Add(time.Hour).UnixMilli())
	require.LessOrEqual(t, dl, after.Add(time.Hour).UnixMilli())
}

// TestConfirmRacesExpiry: of a Confirm and the hold's expiry exactly one
// wins: either the units are sold or they are all back, per race.
func TestConfirmRacesExpiry(t *testing.T) {
	const races = 200
	eachLayout(t, "race", 2, 2*races, func(t *testing.T, ctx context.Context, m *luascript.Manager, s []string) {
		var sold, released atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range races {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				id := fmt.Sprint("r", i)
				ttl := time.Duration(2+i%9) * time.Millisecond
				if err := m.Reserve(ctx, id, lines(s, 1, 2), ttl); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(i%11) * time.Millisecond)
				wg.Add(1)
				go func() { // races the Confirm
					defer wg.Done()
					if _, err := m.Sweep(ctx); err != nil {
						t.Error(err)
					}
				}()
				switch err := m.Confirm(ctx, id); {
				case err == nil:
					sold.Add(1)
				case errors.Is(err, inventory.ErrHoldReleased):
					released.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, races, sold.Load()+released.Load())
		t.Logf("%d confirmed, %d expired first", sold.Load(), released.Load())
		// Release whatever is left, then: initial - available == sold.
		require.Eventually(t, func() bool {
			_, err := m.Sweep(ctx)
			require.NoError(t, err)
			h0, _ := m.Held(ctx, s[0])
			h1, _ := m.Held(ctx, s[1])
			return h0 == 0 && h1 == 0
		}, 10*time.Second, 20*time.Millisecond)
		ck := checker{t, m, ctx}
		ck.stock(s[0], 2*races-sold.Load(), 0)
		ck.stock(s[1], 2*races-2*sold.Load(), 0)
	})
}

// TestSweep releases expired holds nobody touches, from several sweepers
// at once: each hold once. The holds last 2 s, or longer when making them
// took a loaded machine longer than that.
func TestSweep(t *testing.T) {
	layouts(t, func(t *testing.T, c redis.UniversalClient, same bool) {
		ctx := context.Background()
		testenv.TTLRounds(t, 2*time.Second, 8*time.Second, func(ttl time.Duration) bool {
			m, s := layout(t, c, "sweep", 3, 1000, same)
			ck := checker{t, m, ctx}
			require.NoError(t, m.Reserve(ctx, "live", lines(s, 1, 1, 1), time.Minute))
			n, err := m.Sweep(ctx)
			require.NoError(t, err)
			require.Zero(t, n, "nothing due yet")
			const holds = 250 // more than one SweepBatch
			start := time.Now()
			var wg sync.WaitGroup
			for g := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; i < holds; i += 10 {
						if err := m.Reserve(ctx, fmt.Sprint("o", i), lines(s, 1, 2, 3), ttl); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			// No Reserve released an earlier one, so Sweep finds them all.
			if !testenv.Live(t, start, ttl, "the last Reserve (the holds made before any expired)") {
				return false
			}
			time.Sleep(ttl + 50*time.Millisecond) // after the last one's TTL
			ck.stock(s[0], 1000-holds-1, holds+1) // expired, not yet released
			var total atomic.Int64
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := m.Sweep(ctx)
					if err != nil {
						t.Error(err)
					}
					total.Add(int64(n))
				}()
			}
			wg.Wait()
			require.EqualValues(t, holds, total.Load(), "each hold released once")
			ck.stock(s[0], 999, 1)
			ck.stock(s[2], 999, 1)
			require.NoError(t, m.Confirm(ctx, "live"))
			ck.stock(s[1], 999, 0)
			return true
		})
	})
}

// TestReap releases a hold without traffic within the reaper's period.
func TestReap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := newManager(t, testenv.Redis(t))
	require.NoError(t, m.Init(ctx, "shoe", 3))
	require.NoError(t, m.Reserve(ctx, "o1", lines([]string{"shoe"}, 3), 20*time.Millisecond))
	done := make(chan error)
	go func() { done <- inventory.Reap(ctx, m, 20*time.Millisecond, func(err error) { t.Error(err) }) }()
	require.Eventually(t, func() bool {
		h, err := m.Held(context.Background(), "shoe")
		return err == nil && h == 0
	}, 5*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	checker{t, m, context.Background()}.stock("shoe", 3, 0)
}

// TestHoldsLeaveNothing checks the memory bound: once holds and keyed calls
// end, their records last the key TTL and then only the stock keys remain.
func TestHoldsLeaveNothing(t *testing.T) {
	servers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		prefix := testenv.RedisPrefix(t, c)
		const keyTTL = time.Second
		m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithKeyTTL(keyTTL))
		require.NoError(t, err)
		s := skus("mem", 4, false)
		one := s[3]
		s = s[:3]
		for _, sku := range append(s, one) {
			require.NoError(t, m.Init(ctx, sku, 100))
		}
		require.NoError(t, m.Reserve(ctx, "confirmed", lines(s, 1, 1, 1), time.Minute))
		require.NoError(t, m.Confirm(ctx, "confirmed"))
		require.ErrorIs(t, m.Reserve(ctx, "confirmed", lines(s, 1, 1, 1), time.Minute), inventory.ErrDuplicate,
			"the id is remembered for the key TTL")
		require.NoError(t, m.Reserve(ctx, "cancelled", lines(s, 1, 1, 1), time.Minute))
		require.NoError(t, m.Cancel(ctx, "cancelled"))
		require.NoError(t, m.ReduceLines(ctx, lines(s, 1, 1, 1), inventory.WithKey("k")))
		require.ErrorIs(t, m.ReduceLines(ctx, lines(s, 1, 1, 1), inventory.WithKey("k")), inventory.ErrDuplicate)
		require.NoError(t, m.ReduceLines(ctx, lines(s, 1, 1, 1)))
		// No call moves these SKUs after the two holds: Sweep releases them.
		require.NoError(t, m.Reserve(ctx, "expired", lines(s, 1, 1, 1), 10*time.Millisecond))
		require.NoError(t, m.Reserve(ctx, "one", lines([]string{one}, 1), 10*time.Millisecond))
		time.Sleep(50 * time.Millisecond)
		n, err := m.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		time.Sleep(keyTTL + 200*time.Millisecond)
		var left []string
		for _, k := range keys(t, c, prefix+"*") {
			// The stock, and on a Cluster the set of slots to sweep
			// (at most one entry per slot, each gone a minute after its
			// index empties).
			if !strings.Contains(k, "}:s:") && k != rediskeys.SweepSlots(prefix) {
				left = append(left, k)
			}
		}
		require.Empty(t, left, "only stock keys remain")
		require.NoError(t, m.Reserve(ctx, "confirmed", lines(s, 1, 1, 1), time.Minute), "the id is free again")
		require.NoError(t, m.Cancel(ctx, "confirmed"))
		ck := checker{t, m, ctx}
		for _, sku := range s {
			ck.stock(sku, 97, 0)
		}
		ck.stock(one, 100, 0)
	})
}

// TestExpiredIDFreeAfterKeyTTL: a hold that expired and that nothing
// released frees its id once the key TTL has passed since its TTL. The key
// TTL is 300 ms, or longer when the repeated Reserve came too late to find
// the id still taken.
func TestExpiredIDFreeAfterKeyTTL(t *testing.T) {
	layouts(t, func(t *testing.T, c redis.UniversalClient, same bool) {
		ctx := context.Background()
		testenv.TTLRounds(t, 300*time.Millisecond, 5*time.Second, func(keyTTL time.Duration) bool {
			m, s := layout(t, c, "free", 2, 10, same, luascript.WithKeyTTL(keyTTL))
			const ttl = 10 * time.Millisecond
			start := time.Now()
			require.NoError(t, m.Reserve(ctx, "o1", lines(s, 1, 1), ttl))
			time.Sleep(50 * time.Millisecond)
			err := m.Reserve(ctx, "o1", lines(s, 1, 1), time.Minute)
			if !testenv.Live(t, start, ttl+keyTTL, "the Reserve of the expired hold's id") {
				return false
			}
			require.ErrorIs(t, err, inventory.ErrDuplicate, "ended less than the key TTL ago")
			time.Sleep(keyTTL)
			require.NoError(t, m.Reserve(ctx, "o1", lines(s, 2, 2), time.Minute))
			checker{t, m, ctx}.stock(s[0], 8, 2)
			return true
		})
	})
}

// keys lists the keys matching pattern on every master.
func keys(t *testing.T, c redis.UniversalClient, pattern string) []string {
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, s *redis.Client) error {
		ks, err := s.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	}
	require.NoError(t, err)
	return out
}

// TestOrderKeysShareTheSKUSlot checks on the Cluster that every key of a
// SKU is in the slot rediskeys.Slot computes, and that a slot's sweep index
// is in that slot.
func TestOrderKeysShareTheSKUSlot(t *testing.T) {
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	for _, sku := range []string{"plain", "}", "{x}", "a}b{c", "鞋"} {
		for _, k := range []string{rediskeys.Stock("inv", sku), rediskeys.Holds("inv", sku),
			rediskeys.HoldMarker("inv", sku), rediskeys.Held("inv", sku), rediskeys.Part("inv", sku, "n:h:id")} {
			s, err := c.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.EqualValues(t, rediskeys.Slot(sku), s, k)
		}
		s, err := c.ClusterKeySlot(ctx, rediskeys.Order("inv", "h", sku)).Result()
		require.NoError(t, err)
		require.EqualValues(t, rediskeys.OrderSlot("h", sku), s)
	}
	for _, slot := range []int{0, 1, 5460, 5461, 16383} {
		s, err := c.ClusterKeySlot(ctx, rediskeys.SlotSweepIndex("inv", slot)).Result()
		require.NoError(t, err)
		require.EqualValues(t, slot, s)
	}
}

// TestOrdersBadInput: bad arguments are refused before any I/O.
func TestOrdersBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	m, err := luascript.New(c)
	require.NoError(t, err)
	ctx := context.Background()
	ok := []inventory.Line{{SKU: "a", Qty: 1}}
	for name, err := range map[string]error{
		"no lines":    m.ReduceLines(ctx, nil),
		"repeated":    m.ReduceLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}),
		"zero qty":    m.ReturnLines(ctx, []inventory.Line{{SKU: "a", Qty: 0}}),
		"empty key":   m.ReduceLines(ctx, ok, inventory.WithKey("")),
		"bad id":      m.Reserve(ctx, "a\nb", ok, time.Second),
		"short ttl":   m.Reserve(ctx, "o", ok, 0),
		"long ttl":    m.Reserve(ctx, "o", ok, inventory.MaxHoldTTL+1),
		"confirm id":  m.Confirm(ctx, ""),
		"cancel id":   m.Cancel(ctx, strings.Repeat("x", 256)),
		"held sku":    func() error { _, err := m.Held(ctx, ""); return err }(),
		"many lines":  m.ReduceLines(ctx, make([]inventory.Line, inventory.MaxLines+1)),
		"bad sku":     m.ReduceLines(ctx, []inventory.Line{{SKU: "\xff", Qty: 1}}),
		"reserve qty": m.Reserve(ctx, "o", []inventory.Line{{SKU: "a", Qty: inventory.MaxStock + 1}}, time.Second),
	} {
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
}
