package luascript

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
)

// The tests here stop a multi-slot order midway, as a crashed client
// would, by running the protocol's first steps by hand on the three-master
// Cluster, and check that what is left only expires: never an oversell,
// never a lost unit.

type crash struct {
	t     *testing.T
	ctx   context.Context
	m     *Manager
	c     *redis.ClusterClient
	skus  []string // two SKUs on two different masters
	lines []inventory.Line
}

func newCrash(t *testing.T) *crash {
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	m, err := New(c, WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	m.pinGrace = 100 * time.Millisecond
	m.linesTTL = 200 * time.Millisecond
	x := &crash{t: t, ctx: ctx, m: m, c: c}
	masters := map[string]bool{}
	for i := 0; len(x.skus) < 2; i++ {
		sku := fmt.Sprint("crash-", i)
		node, err := c.MasterForKey(ctx, rediskeys.Stock(m.prefix, sku))
		require.NoError(t, err)
		if addr := node.Options().Addr; !masters[addr] {
			masters[addr] = true
			x.skus = append(x.skus, sku)
		}
	}
	for _, sku := range x.skus {
		require.NoError(t, m.Init(ctx, sku, 10))
	}
	x.lines = []inventory.Line{{SKU: x.skus[0], Qty: 3}, {SKU: x.skus[1], Qty: 4}}
	return x
}

func (x *crash) order(kind, id string) *order {
	return x.m.newOrder(kind, id, rediskeys.NewNonce(), x.m.bySlot(x.lines))
}

func (x *crash) levels(avail0, held0, avail1, held1 int64) {
	x.t.Helper()
	for i, want := range [][2]int64{{avail0, held0}, {avail1, held1}} {
		n, err := x.m.Get(x.ctx, x.skus[i])
		require.NoError(x.t, err)
		h, err := x.m.Held(x.ctx, x.skus[i])
		require.NoError(x.t, err)
		require.Equal(x.t, want, [2]int64{n, h}, "available and held of %s", x.skus[i])
	}
}

// sweepUntil sweeps until the levels are as given, and returns how many
// holds the sweeps released.
func (x *crash) sweepUntil(avail0, held0, avail1, held1 int64) int {
	x.t.Helper()
	released := 0
	require.Eventually(x.t, func() bool {
		n, err := x.m.Sweep(x.ctx)
		require.NoError(x.t, err)
		released += n
		var got []int64
		for _, sku := range x.skus {
			a, _ := x.m.Get(x.ctx, sku)
			h, _ := x.m.Held(x.ctx, sku)
			got = append(got, a, h)
		}
		return fmt.Sprint(got) == fmt.Sprint([]int64{avail0, held0, avail1, held1})
	}, 10*time.Second, 20*time.Millisecond)
	return released
}

func TestCrashInReserve(t *testing.T) {
	x := newCrash(t)
	const ttl = 100 * time.Millisecond
	o := x.order(kindHold, "o1")
	require.Len(t, o.groups, 2)
	require.NoError(t, x.m.begin(x.ctx, o, ttl, "hold", x.lines))
	require.NoError(t, x.m.makePart(x.ctx, o, 0, "hold", ttl, driver.DirReduce))
	// The client dies here: one part made, the record not held.
	x.levels(7, 3, 10, 0)
	require.ErrorIs(t, x.m.Confirm(x.ctx, "o1"), inventory.ErrContention, "the Reserve never finished")
	require.Equal(t, 1, x.sweepUntil(10, 0, 10, 0), "the part expired without traffic")
	require.NoError(t, x.m.Reserve(x.ctx, "o1", x.lines, time.Minute), "the dead attempt did not use up the id")
	x.levels(7, 3, 6, 4)
	require.NoError(t, x.m.Confirm(x.ctx, "o1"))
	x.levels(7, 0, 6, 0)
}

func TestCrashInReserveLazy(t *testing.T) {
	x := newCrash(t)
	const ttl = 50 * time.Millisecond
	o := x.order(kindHold, "o1")
	require.NoError(t, x.m.begin(x.ctx, o, ttl, "hold", x.lines))
	require.NoError(t, x.m.makePart(x.ctx, o, 0, "hold", ttl, driver.DirReduce))
	time.Sleep(2 * ttl)
	left, err := x.m.Reduce(x.ctx, x.skus[0], 10)
	require.NoError(t, err, "the Reduce released the dead attempt's part first")
	require.Zero(t, left)
	x.levels(0, 0, 10, 0)
}

// TestCrashInConfirmBeforeCommit: the hold lasts 200 ms, or longer when
// the pin came too late to find it live.
func TestCrashInConfirmBeforeCommit(t *testing.T) {
	testenv.TTLRounds(t, 200*time.Millisecond, 4*time.Second, func(ttl time.Duration) bool {
		x := newCrash(t)
		start := time.Now()
		require.NoError(t, x.m.Reserve(x.ctx, "o1", x.lines, ttl))
		o := x.recordOrder("o1")
		_, st, err := x.m.eval(x.ctx, []string{o.groups[0].part}, "pin", o.nonce, x.m.pinGrace.Milliseconds())
		if !testenv.Live(t, start, ttl, "the pin") {
			return false
		}
		require.NoError(t, err)
		require.Equal(t, "ok", st)
		// The Confirm dies here: part 0 pinned, part 1 not, the record held.
		time.Sleep(ttl)
		left, err := x.m.Reduce(x.ctx, x.skus[1], 1)
		require.NoError(t, err, "the unpinned part expired and the Reduce released it")
		require.EqualValues(t, 9, left)
		_, err = x.m.Reduce(x.ctx, x.skus[0], 10)
		require.ErrorIs(t, err, inventory.ErrInsufficientStock, "a pinned part waits for its record")
		require.Equal(t, 1, x.sweepUntil(10, 0, 9, 0), "Sweep settled the pinned part by its record")
		require.ErrorIs(t, x.m.Confirm(x.ctx, "o1"), inventory.ErrHoldReleased)
		x.levels(10, 0, 9, 0)
		return true
	})
}

// TestCrashInConfirmAfterCommit: the hold lasts 100 ms, or longer when the
// pins came too late to find it live.
func TestCrashInConfirmAfterCommit(t *testing.T) {
	testenv.TTLRounds(t, 100*time.Millisecond, 2*time.Second, func(ttl time.Duration) bool {
		x := newCrash(t)
		start := time.Now()
		require.NoError(t, x.m.Reserve(x.ctx, "o1", x.lines, ttl))
		o := x.recordOrder("o1")
		var sts []string
		for _, g := range o.groups {
			_, st, err := x.m.eval(x.ctx, []string{g.part}, "pin", o.nonce, x.m.pinGrace.Milliseconds())
			require.NoError(t, err)
			sts = append(sts, st)
		}
		if !testenv.Live(t, start, ttl, "the pins") {
			return false
		}
		require.Equal(t, []string{"ok", "ok"}, sts)
		st, err := x.m.recordOp(x.ctx, o, "commit", "held", "confirmed")
		require.NoError(t, err)
		require.Equal(t, "ok", st)
		// The Confirm dies here: the record says confirmed, no part is sold.
		ttlLeft, err := x.c.PTTL(x.ctx, o.rec).Result()
		require.NoError(t, err)
		require.Less(t, ttlLeft, time.Duration(0), "a confirmed record stays until its parts are sold")
		time.Sleep(ttl)
		require.Zero(t, x.sweepUntil(7, 0, 6, 0), "Sweep sold the parts: nothing released")
		require.ErrorIs(t, x.m.Confirm(x.ctx, "o1"), inventory.ErrDuplicate)
		require.ErrorIs(t, x.m.Cancel(x.ctx, "o1"), inventory.ErrHoldConfirmed)
		ttlLeft, err = x.c.PTTL(x.ctx, o.rec).Result()
		require.NoError(t, err)
		require.Greater(t, ttlLeft, time.Duration(0), "then it lasts the key TTL")
		x.levels(7, 0, 6, 0)
		return true
	})
}

func TestCrashInLinesCall(t *testing.T) {
	for _, dir := range []driver.Direction{driver.DirReduce, driver.DirReturn} {
		t.Run(string(dir), inRounds(200*time.Millisecond, 4*time.Second, func(t *testing.T, ttl time.Duration) bool {
			x := newCrash(t)
			x.m.linesTTL = ttl
			start := time.Now()
			o := x.order(kindKeyed, string(dir)+":cart-1")
			kind := map[driver.Direction]string{driver.DirReduce: "reduce", driver.DirReturn: "return"}[dir]
			require.NoError(t, x.m.begin(x.ctx, o, x.m.linesTTL, "keyed", x.lines))
			require.NoError(t, x.m.makePart(x.ctx, o, 0, kind, x.m.linesTTL, dir))
			// The call dies here: one pinned part, the record reserving.
			if dir == driver.DirReduce {
				x.levels(7, 3, 10, 0)
			} else {
				x.levels(10, 0, 10, 0)
			}
			call := x.m.ReduceLines
			if dir == driver.DirReturn {
				call = x.m.ReturnLines
			}
			err := call(x.ctx, x.lines, inventory.WithKey("cart-1"))
			if !testenv.Live(t, start, ttl, "the call with the dead call's key") {
				return false
			}
			require.ErrorIs(t, err, inventory.ErrContention, "within its time, the dead call may still be under way")
			x.sweepUntil(10, 0, 10, 0)
			require.Eventually(t, func() bool { // the pending return is dropped too
				_, err := x.m.Sweep(x.ctx)
				require.NoError(t, err)
				part, err := x.c.Exists(x.ctx, o.groups[0].part).Result()
				require.NoError(t, err)
				rec, err := x.c.Exists(x.ctx, o.rec).Result()
				require.NoError(t, err)
				return part+rec == 0
			}, 10*time.Second, 20*time.Millisecond)
			require.NoError(t, call(x.ctx, x.lines, inventory.WithKey("cart-1")),
				"the dead call did not take effect, so its key is free")
			require.ErrorIs(t, call(x.ctx, x.lines, inventory.WithKey("cart-1")), inventory.ErrDuplicate)
			if dir == driver.DirReduce {
				x.levels(7, 0, 6, 0)
			} else {
				x.levels(13, 0, 14, 0)
			}
			return true
		}))
	}
}

// inRounds is testenv.TTLRounds for t.Run.
func inRounds(ttl, max time.Duration, round func(t *testing.T, ttl time.Duration) bool) func(*testing.T) {
	return func(t *testing.T) {
		testenv.TTLRounds(t, ttl, max, func(ttl time.Duration) bool { return round(t, ttl) })
	}
}

// recordOrder reads the order of hold id back from its record.
func (x *crash) recordOrder(id string) *order {
	x.t.Helper()
	rec := rediskeys.Order(x.m.prefix, kindHold, id)
	v, err := x.c.HMGet(x.ctx, rec, "st", "n", "sl", "ki").Result()
	require.NoError(x.t, err)
	o, err := x.m.orderFromRecord(rec, v[1], v[2], v[3])
	require.NoError(x.t, err)
	require.Len(x.t, o.groups, 2)
	return o
}

// TestReserveRetryTakesOver: a retry of a multi-slot Reserve that died
// after its first part takes the hold over at once, long before the dead
// attempt's time passes: it releases the dead attempt's part and holds
// every line once; a late part of the dead attempt is its own (its
// nonce), and the dead attempt's commit finds its record gone.
func TestReserveRetryTakesOver(t *testing.T) {
	x := newCrash(t)
	o := x.order(kindHold, "o1")
	require.NoError(t, x.m.begin(x.ctx, o, time.Hour, "hold", x.lines))
	require.NoError(t, x.m.makePart(x.ctx, o, 0, "hold", time.Hour, driver.DirReduce))
	// The client dies here: one part made, the record reserving.
	x.levels(7, 3, 10, 0)
	require.ErrorIs(t, x.m.Reserve(x.ctx, "o1", x.lines[:1], time.Minute), inventory.ErrContention,
		"a Reserve of the id with other lines does not take it over")
	require.NoError(t, x.m.Reserve(x.ctx, "o1", x.lines, time.Minute), "the retry takes the dead attempt over")
	x.levels(7, 3, 6, 4)
	require.NoError(t, x.m.makePart(x.ctx, o, 1, "hold", time.Hour, driver.DirReduce), "a late part of the dead attempt")
	x.levels(7, 3, 2, 8) // its own, under its nonce
	st, err := x.m.recordOp(x.ctx, o, "commit", "reserving", "held")
	require.NoError(t, err)
	require.NotEqual(t, "ok", st, "the dead attempt's commit")
	require.ErrorIs(t, x.m.Reserve(x.ctx, "o1", x.lines, time.Minute), inventory.ErrDuplicate)
	require.NoError(t, x.m.Confirm(x.ctx, "o1"))
	x.levels(7, 0, 2, 4) // the retry's units sold; the late part waits for its time
}
