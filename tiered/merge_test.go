package tiered

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/merge/mergetest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
)

var (
	moveSHA  = redis.NewScript(moveLua).Hash()
	batchSHA = redis.NewScript(batchLua).Hash()
)

// gate is a go-redis hook on a client: it counts move.lua calls and the
// calls merged into each batch.lua call, can hold the next move.lua call
// until released (so that the calls made meanwhile queue behind it and go
// as one batch), and can cut the connection of the next batch.lua call
// after Redis ran it, before its reply is read (with cutDialer).
type gate struct {
	mu      sync.Mutex
	singles int
	batches []int
	hold    chan struct{} // the next move.lua call waits for it to close
	held    chan struct{} // closed once a call waits
	armCut  bool          // cut the reply of the next batch
	cut     atomic.Bool   // the next reply read on any connection is cut
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { // WithReplicas: script and WAIT
		for _, cmd := range cmds {
			g.before(cmd)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			g.after(cmd)
		}
		return err
	}
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.before(cmd)
		err := next(ctx, cmd)
		g.after(cmd)
		return err
	}
}

// script tells move.lua's and batch.lua's calls, and how many calls a
// batch holds.
func script(cmd redis.Cmder) (move bool, batch int) {
	a := cmd.Args()
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return false, 0
	}
	switch src := fmt.Sprint(a[1]); src {
	case moveSHA, moveLua:
		return true, 0
	case batchSHA, batchLua: // per SKU its item count, then items (c, q): c calls, or one keyed (c 0)
		argv := a[3+a[2].(int)+3:]
		n := func(i int) int { v, _ := strconv.Atoi(fmt.Sprint(argv[i])); return v }
		for len(argv) > 0 {
			m := n(0)
			for i := 1; i < 1+2*m; i += 2 {
				batch += max(n(i), 1)
			}
			argv = argv[1+2*m:]
		}
		return false, batch
	}
	return false, 0
}

// before holds cmd when asked to, and arms the cut.
func (g *gate) before(cmd redis.Cmder) {
	move, batch := script(cmd)
	var wait chan struct{}
	g.mu.Lock()
	if move && g.hold != nil {
		wait = g.hold
		g.hold = nil
		close(g.held)
	}
	if batch > 0 && g.armCut {
		g.armCut = false
		g.cut.Store(true)
	}
	g.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

// after counts cmd, unless Redis answered NOSCRIPT (the call is sent again
// as EVAL).
func (g *gate) after(cmd redis.Cmder) {
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return
	}
	move, batch := script(cmd)
	g.mu.Lock()
	defer g.mu.Unlock()
	if move {
		g.singles++
	}
	if batch > 0 {
		g.batches = append(g.batches, batch)
	}
}

// holdNext makes the next move.lua call wait until release is called; it
// returns once that call waits.
func (g *gate) holdNext() (waiting <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold, g.held = make(chan struct{}), make(chan struct{})
	h := g.hold
	return g.held, func() { close(h) }
}

func (g *gate) counts() (int, []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.singles, slices.Clone(g.batches)
}

// cutConn cuts its connection at the first read after its gate's cut is
// set: the reply of a command Redis ran is lost, as when a connection
// breaks at the wrong moment.
type cutConn struct {
	net.Conn
	g *gate
}

func (c *cutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.g.cut.CompareAndSwap(true, false) {
		c.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// gated returns a client of addr with g on it, go-redis's resends left on
// (MaxRetries 3): a script call must still never be sent twice.
func gated(t *testing.T, addr string, g *gate) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, MaxRetries: 3, ContextTimeoutEnabled: true,
		DialTimeout: 500 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &cutConn{Conn: conn, g: g}, nil
		}})
	c.AddHook(g)
	t.Cleanup(func() { c.Close() })
	for _, src := range []string{moveLua, batchLua} { // so that a cut never meets NOSCRIPT
		require.NoError(t, c.ScriptLoad(context.Background(), src).Err())
	}
	return c
}

// outcome is what one call returned.
type outcome struct {
	left int64
	err  error
}

// batched runs first as a call held in flight, then each of calls in
// order, each queued behind it before the next starts, then lets them all
// go: the calls form one batch. It returns the outcomes, first's first.
func batched(t *testing.T, m *Manager, g *gate, sku string, first func() (int64, error), calls ...func() (int64, error)) []outcome {
	t.Helper()
	waiting, release := g.holdNext()
	out := make([]outcome, 1+len(calls))
	var wg sync.WaitGroup
	run := func(i int, f func() (int64, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := f()
			out[i] = outcome{n, err}
		}()
	}
	run(0, first)
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("the first call never reached Redis")
	}
	slot := m.groupOf(sku)
	for i, f := range calls {
		run(i+1, f)
		require.Eventually(t, func() bool { return m.queue.Len(slot) == i+1 }, 10*time.Second, time.Millisecond, "call %d queued", i+1)
	}
	release()
	wg.Wait()
	return out
}

// checkOutcomes asserts that each call's outcome is the one wanted: its
// remaining, and its error (nil, or one wrapping the error wanted).
func checkOutcomes(t *testing.T, want, out []outcome) {
	t.Helper()
	require.Len(t, out, len(want))
	for i, o := range out {
		assert.Equal(t, want[i].left, o.left, "call %d: %v", i, o.err)
		if want[i].err == nil {
			assert.NoError(t, o.err, "call %d", i)
		} else {
			assert.ErrorIs(t, o.err, want[i].err, "call %d", i)
		}
	}
}

// call returns a call of move (a Manager's Reduce or Return) of qty units
// of sku, with key as its idempotency key unless it is "".
func call(ctx context.Context, move func(context.Context, string, int64, ...inventory.Option) (int64, error),
	sku string, qty int64, key string) func() (int64, error) {
	return func() (int64, error) {
		var opts []inventory.Option
		if key != "" {
			opts = append(opts, inventory.WithKey(key))
		}
		return move(ctx, sku, qty, opts...)
	}
}

// reduce returns a call of m.Reduce (see call).
func reduce(ctx context.Context, m *Manager, sku string, qty int64, key string) func() (int64, error) {
	return call(ctx, m.Reduce, sku, qty, key)
}

// keyedReduces returns n calls of m.Reduce of qty units of sku, call i
// keyed "k<i>".
func keyedReduces(ctx context.Context, m *Manager, sku string, qty int64, n int) []func() (int64, error) {
	calls := make([]func() (int64, error), n)
	for i := range calls {
		calls[i] = reduce(ctx, m, sku, qty, fmt.Sprint("k", i))
	}
	return calls
}

// gatedManager returns a Manager made with opts over a client of the
// Redis at addr with a new gate on it (see gated), and MySQL; and the gate.
func gatedManager(t *testing.T, addr string, opts ...Option) (*Manager, *gate) {
	g := new(gate)
	e := newEnv(t, gated(t, addr, g), testenv.MySQL(t))
	return e.manager(t, opts...), g
}

// warmed inits sku with stock units and warms it: the allotment holds
// what a chunk grants.
func warmed(ctx context.Context, t *testing.T, m *Manager, sku string, stock int64) {
	t.Helper()
	require.NoError(t, m.Init(ctx, sku, stock))
	_, err := m.Warm(ctx, sku)
	require.NoError(t, err)
}

// journal returns the fields of sku's journal entries but their sequence
// number ("n"), oldest first.
func journal(ctx context.Context, t *testing.T, m *Manager, sku string) []map[string]any {
	t.Helper()
	entries, err := m.rdb.XRange(ctx, m.journalKey(sku), "-", "+").Result()
	require.NoError(t, err)
	var fields []map[string]any
	for _, e := range entries {
		delete(e.Values, "n")
		fields = append(fields, e.Values)
	}
	return fields
}

// TestMergedAnswers merges, in one batch, keyed and unkeyed Reduces and a
// Return: a call that no longer fits in the middle of the batch gets
// ErrInsufficientStock with the stock left then, a key used twice in the
// batch gets ErrDuplicate with its first call's remaining, the calls after
// them still move; the batch's moves are journaled as one entry with
// their units, and SQL has them all after Drain.
func TestMergedAnswers(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(100), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	const sku = "mixed"
	warmed(ctx, t, m, sku, 10) // the allotment holds all 10
	out := batched(t, m, g, sku, reduce(ctx, m, sku, 1, ""),
		reduce(ctx, m, sku, 3, "a"),      // 6
		reduce(ctx, m, sku, 5, ""),       // 1
		reduce(ctx, m, sku, 4, "c"),      // refused: 1 left
		reduce(ctx, m, sku, 3, "a"),      // duplicate of the first "a": 6
		call(ctx, m.Return, sku, 2, "r"), // 3
		reduce(ctx, m, sku, 3, ""),       // 0
		reduce(ctx, m, sku, 1, ""),       // refused: 0 left
	)
	want := []outcome{{9, nil}, {6, nil}, {1, nil}, {1, inventory.ErrInsufficientStock}, {6, inventory.ErrDuplicate},
		{3, nil}, {0, nil}, {0, inventory.ErrInsufficientStock}}
	checkOutcomes(t, want, out)
	single, batches := g.counts()
	assert.Equal(t, []int{7}, batches, "the 7 queued calls went as one batch")
	assert.Equal(t, 1, single)

	// The key of the refused call is free, the others are recorded.
	left, err := m.Reduce(ctx, sku, 1, inventory.WithKey("a"))
	assert.ErrorIs(t, err, inventory.ErrDuplicate)
	assert.EqualValues(t, 6, left)
	_, err = m.Return(ctx, sku, 1, inventory.WithKey("c"))
	require.NoError(t, err, "a Return with the refused Reduce's key: another direction, another record")
	left, err = m.Reduce(ctx, sku, 1, inventory.WithKey("c"))
	require.NoError(t, err, "the refused call left no record")
	assert.EqualValues(t, 0, left)

	assert.Equal(t, []map[string]any{
		{"d": "1"}, // the lone call
		{"d": "9", "s": "11", "k": "3 6 a\n-2 3 r"},                                    // the batch's 4 moves: 3+5+3 sold, 2 returned; its keyed moves
		{"d": "-1", "k": "-1 1 c"}, {"d": "1", "k": "1 0 c"}}, journal(ctx, t, m, sku), // the keyed calls after it
		"one journal entry per lone call and one per SKU per batch, with its units")
	s := m.drained(ctx, t, sku, 10)
	assert.EqualValues(t, 1+3+5+3+1, s.sold)
	assert.EqualValues(t, 2+1, s.returned)
}

// TestMergedRuns merges, in one batch, the calls of two SKUs of one slot,
// interleaved: batch.lua gets each SKU's calls in order, consecutive
// unkeyed calls of the same units as one run. A run that fits only in
// part moves its first calls and refuses the others; a Return run past
// MaxStock is refused; each call gets its own remaining, and each SKU one
// journal entry.
func TestMergedRuns(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(100), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	const a = "runs"
	b := ""
	for i := 0; b == ""; i++ { // another SKU of a's slot
		if s := fmt.Sprint("runs", i); rediskeys.Slot(s) == rediskeys.Slot(a) {
			b = s
		}
	}
	require.NoError(t, m.Init(ctx, a, 5))
	require.NoError(t, m.Init(ctx, b, 3))
	_, err := m.Warm(ctx, a, b) // the allotments hold all the stock
	require.NoError(t, err)
	ret := func(sku string, qty int64, key string) func() (int64, error) {
		return call(ctx, m.Return, sku, qty, key)
	}
	out := batched(t, m, g, a, reduce(ctx, m, a, 1, ""), // 4
		reduce(ctx, m, a, 1, ""),       // 3
		reduce(ctx, m, b, 1, ""),       // b 2
		reduce(ctx, m, a, 1, ""),       // 2
		reduce(ctx, m, a, 1, ""),       // 1
		reduce(ctx, m, a, 1, ""),       // 0
		reduce(ctx, m, a, 1, ""),       // refused: 0 left
		reduce(ctx, m, b, 2, ""),       // b 0
		reduce(ctx, m, a, 1, ""),       // refused: 0 left
		ret(a, 1, ""),                  // 1
		ret(a, inventory.MaxStock, ""), // refused: past MaxStock
		reduce(ctx, m, a, 1, "k"),      // 0
		ret(b, 2, ""),                  // b 2
		ret(b, 2, ""),                  // b 4
		reduce(ctx, m, b, 4, "k"),      // b 0
		reduce(ctx, m, b, 4, "k"),      // b duplicate: 0
	)
	want := []outcome{{4, nil}, {3, nil}, {2, nil}, {2, nil}, {1, nil}, {0, nil},
		{0, inventory.ErrInsufficientStock}, {0, nil}, {0, inventory.ErrInsufficientStock},
		{1, nil}, {0, inventory.ErrInvalidArgument}, {0, nil}, {2, nil}, {4, nil}, {0, nil}, {0, inventory.ErrDuplicate}}
	checkOutcomes(t, want, out)
	_, batches := g.counts()
	assert.Equal(t, []int{15}, batches, "the 15 queued calls went as one batch")
	for sku, want := range map[string][]map[string]any{
		a: {{"d": "1"}, {"d": "4", "s": "5", "k": "1 0 k"}}, // the lone call; the batch: 4+1 sold, 1 returned
		b: {{"d": "3", "s": "7", "k": "4 0 k"}},             // 1+2+4 sold, 2+2 returned
	} {
		assert.Equal(t, want, journal(ctx, t, m, sku), "%s: one journal entry per SKU per batch", sku)
	}
	m.drained(ctx, t, a, 5)
	checkDrained(t, m.totals(ctx, t, b), 3)
}

// TestMergedAcrossSlots merges, on a plain client (one server), the calls
// of SKUs of different slots: they queue behind the same call in flight and
// go as one batch, each SKU with its own journal entry.
func TestMergedAcrossSlots(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(100), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	const a = "slots"
	b := ""
	for i := 0; b == ""; i++ { // a SKU of another slot
		if s := fmt.Sprint("slots", i); rediskeys.Slot(s) != rediskeys.Slot(a) {
			b = s
		}
	}
	require.Equal(t, m.groupOf(a), m.groupOf(b), "one group on one server")
	warmed(ctx, t, m, a, 10)
	warmed(ctx, t, m, b, 10)
	out := batched(t, m, g, a, reduce(ctx, m, a, 1, ""), // 9
		reduce(ctx, m, b, 2, ""),  // b 8
		reduce(ctx, m, a, 3, ""),  // 6
		reduce(ctx, m, b, 1, "k"), // b 7
	)
	checkOutcomes(t, []outcome{{9, nil}, {8, nil}, {6, nil}, {7, nil}}, out)
	single, batches := g.counts()
	assert.Equal(t, []int{3}, batches, "the 3 queued calls went as one batch")
	assert.Equal(t, 1, single)
	for sku, want := range map[string][]map[string]any{
		a: {{"d": "1"}, {"d": "3", "s": "3"}},   // the lone call; the batch's
		b: {{"d": "3", "s": "3", "k": "1 7 k"}}, // 2+1 sold; its keyed move
	} {
		assert.Equal(t, want, journal(ctx, t, m, sku), "%s: one journal entry per SKU per batch", sku)
	}
	m.drained(ctx, t, a, 10)
	checkDrained(t, m.totals(ctx, t, b), 10)
}

// TestMergedShort merges calls on an allotment that cannot cover them all
// while SQL's pool can: the call that finds it short grants and is
// answered after the grant; the calls around it are not refused.
func TestMergedShort(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(10), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	const sku = "short"
	warmed(ctx, t, m, sku, 100) // allotment 10, pool 90
	out := batched(t, m, g, sku, reduce(ctx, m, sku, 1, ""),
		reduce(ctx, m, sku, 7, "x"), // allotment 2
		reduce(ctx, m, sku, 5, ""),  // short: grants, then again
		reduce(ctx, m, sku, 2, "y"), // allotment 0
	)
	for i, o := range out {
		require.NoError(t, o.err, "call %d", i)
	}
	assert.EqualValues(t, []int64{99, 92, 85, 90}, []int64{out[0].left, out[1].left, out[2].left, out[3].left},
		"the short call is answered after the grant, after the call behind it")
	assert.EqualValues(t, 1, m.Stalls())
	assert.EqualValues(t, 15, m.drained(ctx, t, sku, 100).sold)
}

// TestMergedNoState merges calls on a SKU whose Redis state is gone: each
// warms it up from SQL and calls again, and none is refused.
func TestMergedNoState(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(50), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	const sku = "cold"
	warmed(ctx, t, m, sku, 100)
	_, err := m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	require.NoError(t, m.Drain(ctx))
	require.NoError(t, m.rdb.Del(ctx, m.stateKey(sku)).Err()) // Redis lost the SKU
	out := batched(t, m, g, sku, reduce(ctx, m, sku, 1, ""), keyedReduces(ctx, m, sku, 2, 5)...)
	var lefts []int64
	for i, o := range out {
		require.NoError(t, o.err, "call %d", i)
		lefts = append(lefts, o.left)
	}
	slices.Sort(lefts)
	// The 49 units of the lost allotment are not reused: 50 in the pool,
	// 11 sold of them.
	assert.Equal(t, len(lefts), len(slices.Compact(slices.Clone(lefts))), "each call its own remaining: %v", lefts)
	assert.EqualValues(t, 39, lefts[0])
	assert.LessOrEqual(t, lefts[len(lefts)-1], int64(49))
	left, err := m.Get(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 39, left)
	_, batches := g.counts()
	assert.Contains(t, batches, 5, "the calls went to Redis as a batch first")
}

// TestMergedLoad runs many buyers, a quarter of the keys used twice, on a
// small stock with small chunks: every success has its own remaining
// value, together exactly 0..stock-1; the others are refused or told
// ErrDuplicate with their key's first remaining; calls were merged, no
// batch over the bound; SQL agrees after Drain.
func TestMergedLoad(t *testing.T) {
	const buyers, stock, maxBatch = 600, 150, 16
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(20), WithLowWater(8), WithMaxBatch(maxBatch), WithMaxAttempts(50))
	ctx := ctxT(t, 2*time.Minute)
	const sku = "load"
	require.NoError(t, m.Init(ctx, sku, stock))
	answers := mergetest.Buyers(buyers, func(key string) (int64, error) {
		return m.Reduce(ctx, sku, 1, inventory.WithKey(key))
	})
	mergetest.CheckAnswers(t, stock, answers)
	single, batches := g.counts()
	mergetest.CheckMerged(t, buyers, single, batches, maxBatch)
	assert.EqualValues(t, stock, m.drained(ctx, t, sku, stock).sold)
}

// TestMergedBatchFails kills a private Redis while a batch waits behind
// the call in flight: the call in flight and every call of the batch fail
// (outcome unknown, no sentinel), and the breaker counts the batch's
// failure once beside the single call's: with WithBreaker(2, ...) the
// circuit is open after them.
func TestMergedBatchFails(t *testing.T) {
	srv := faulttest.StartRedis(t)
	m, g := gatedManager(t, srv.Addr(), WithChunk(100), WithLowWater(0), WithBreaker(2, time.Minute))
	ctx := ctxT(t, time.Minute)
	const sku = "doomed"
	warmed(ctx, t, m, sku, 100)
	waiting, release := g.holdNext()
	first := make(chan error, 1)
	go func() { _, err := m.Reduce(ctx, sku, 1); first <- err }()
	<-waiting
	const queued = 4
	errs := make(chan error, queued)
	for i := range queued {
		go func() { _, err := m.Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprint(i))); errs <- err }()
		require.Eventually(t, func() bool { return m.queue.Len(m.groupOf(sku)) == i+1 }, 10*time.Second, time.Millisecond)
	}
	srv.Kill()
	release()
	require.Error(t, <-first)
	for range queued {
		err := <-errs
		require.Error(t, err)
		require.ErrorContains(t, err, "merged with 3 other calls")
		for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrDuplicate, inventory.ErrNotFound, ErrFallback} {
			require.NotErrorIs(t, err, s)
		}
	}
	_, batches := g.counts()
	assert.Equal(t, []int{queued}, batches)
	assert.True(t, m.br.open(), "the single call's failure and the batch's opened the circuit (2 failures)")
	srv.Start() // for the cleanup of its keys
}

// TestMergedResendAppliedOnce cuts the connection of a batch after Redis
// ran it, before its reply arrives, on a client that resends (MaxRetries
// 3): the batch's calls fail, outcome unknown, and the batch was applied
// once; their keyed retries return ErrDuplicate.
func TestMergedResendAppliedOnce(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(100), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	const sku = "cut"
	warmed(ctx, t, m, sku, 100)
	g.mu.Lock()
	g.armCut = true
	g.mu.Unlock()
	calls := keyedReduces(ctx, m, sku, 2, 3)
	out := batched(t, m, g, sku, reduce(ctx, m, sku, 1, ""), calls...)
	require.NoError(t, out[0].err)
	for _, o := range out[1:] {
		require.ErrorContains(t, o.err, "merged with 2 other calls", "the batch's reply was lost")
		require.NotErrorIs(t, o.err, inventory.ErrDuplicate)
	}
	_, batches := g.counts()
	require.Equal(t, []int{3}, batches, "the batch was sent once")
	left, err := m.Get(ctx, sku)
	require.NoError(t, err)
	require.EqualValues(t, 100-1-3*2, left, "the batch was applied once")
	for i := range calls {
		left, err := m.Reduce(ctx, sku, 2, inventory.WithKey(fmt.Sprint("k", i)))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.EqualValues(t, 99-2*(i+1), left)
	}
	assert.EqualValues(t, 7, m.drained(ctx, t, sku, 100).sold)
}

// TestLoneCallsAreNotMerged checks that calls one after another each go to
// Redis at once, as their own move.lua call.
func TestLoneCallsAreNotMerged(t *testing.T) {
	m, g := gatedManager(t, testenv.Redis(t).Options().Addr, WithChunk(100), WithLowWater(0))
	ctx := ctxT(t, time.Minute)
	warmed(ctx, t, m, "shoe", 100)
	mergetest.CheckLoneCalls(t, 30, 20, func(key string) error {
		_, err := m.Reduce(ctx, "shoe", 1, inventory.WithKey(key))
		return err
	}, g.counts)
}

// TestMergeOptions checks WithMaxBatch's and WithReplicas's ranges.
func TestMergeOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	db := testenv.MySQL(t)
	for _, n := range []int{1, 2, DefaultMaxBatch, MaxBatch} {
		m, err := New(rdb, db, WithMaxBatch(n))
		require.NoError(t, err, n)
		require.Equal(t, n > 1, m.queue != nil, "merging on unless WithMaxBatch(1)")
	}
	m, err := New(rdb, db, WithReplicas(1, time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, 1, m.cfg.replicas)
	for name, o := range map[string]Option{
		"batch -1": WithMaxBatch(-1), "batch 0": WithMaxBatch(0), "batch past max": WithMaxBatch(MaxBatch + 1),
		"replicas 0": WithReplicas(0, time.Second), "replicas -1": WithReplicas(-1, time.Second),
		"replica timeout 0": WithReplicas(1, 0), "replica timeout 1us": WithReplicas(1, time.Microsecond),
	} {
		_, err := New(rdb, db, o)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
}
