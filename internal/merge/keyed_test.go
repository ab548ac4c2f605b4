package merge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyedRig is a Keyed[string, int, int, int] whose send records each
// batch's requests and the key's state it saw, answers req*10, counts its
// batches in the state, and blocks while hold says so.
type keyedRig struct {
	k       *Keyed[string, int, int, int]
	mu      sync.Mutex
	batches [][]int
	states  []int
	hold    func(ctx context.Context, batch []*Call[int, int]) // nil: none
}

func newKeyedRig(max int) *keyedRig {
	r := &keyedRig{}
	r.k = NewKeyed(max, func(ctx context.Context, key string, state *int, batch []*Call[int, int]) {
		var reqs []int
		for _, c := range batch {
			reqs = append(reqs, c.Req)
			c.Ans = c.Req * 10
		}
		r.mu.Lock()
		r.batches = append(r.batches, reqs)
		r.states = append(r.states, *state)
		hold := r.hold
		r.mu.Unlock()
		*state++
		if hold != nil {
			hold(ctx, batch)
		}
	})
	return r
}

// queued returns how many calls of key wait, not yet taken, and whether
// key has a group.
func (r *keyedRig) queued(key string) (int, bool) {
	r.k.mu.Lock()
	defer r.k.mu.Unlock()
	g, ok := r.k.groups[key]
	if !ok {
		return 0, false
	}
	return len(g.queue), true
}

// do runs req on key in a goroutine, its result on the channel returned.
func (r *keyedRig) do(ctx context.Context, key string, req int) <-chan result {
	ch := make(chan result, 1)
	go func() {
		a, err := r.k.Do(ctx, key, req)
		ch <- result{a, err}
	}()
	return ch
}

type result struct {
	ans int
	err error
}

func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not return")
		return result{}
	}
}

// TestKeyedOrderAndBound: the calls that queue behind a batch in flight go
// in arrival order, at most max a batch; the key's state is kept from
// batch to batch and starts over once its group went idle and was deleted;
// another key is not held up meanwhile; a caller that leaves before its
// call is taken gets ctx's error alone, and its call is never sent.
func TestKeyedOrderAndBound(t *testing.T) {
	r := newKeyedRig(3)
	gate := make(chan struct{})
	var once sync.Once
	r.hold = func(_ context.Context, batch []*Call[int, int]) {
		if batch[0].Req == 0 {
			once.Do(func() { <-gate })
		}
	}
	ctx := context.Background()
	var chs []<-chan result
	chs = append(chs, r.do(ctx, "a", 0))
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) == 1 }, 5*time.Second, time.Millisecond)

	// Queue 1..7 in that order behind the batch in flight, and one that
	// leaves (99) in the middle.
	leave, cancel := context.WithCancel(ctx)
	var left <-chan result
	n := 0
	queue := func(ctx context.Context, req int) <-chan result {
		ch := r.do(ctx, "a", req)
		n++
		require.Eventually(t, func() bool { q, _ := r.queued("a"); return q == n }, 5*time.Second, time.Millisecond)
		return ch
	}
	for i := 1; i <= 7; i++ {
		chs = append(chs, queue(ctx, i))
		if i == 4 {
			left = queue(leave, 99)
		}
	}
	// Another key is served while "a" is held.
	assert.Equal(t, 50, recv(t, r.do(ctx, "b", 5)).ans)
	cancel()
	res := recv(t, left)
	assert.Same(t, context.Canceled, res.err, "never taken: ctx's error alone")
	q, _ := r.queued("a")
	assert.Equal(t, 7, q, "the call that left is out of the queue")

	close(gate)
	for i, ch := range chs {
		res := recv(t, ch)
		require.NoError(t, res.err)
		assert.Equal(t, i*10, res.ans)
	}
	r.mu.Lock()
	var batchesA [][]int
	var statesA []int
	for i, b := range r.batches {
		if b[0] != 5 { // not key b's
			batchesA = append(batchesA, b)
			statesA = append(statesA, r.states[i])
		}
	}
	r.mu.Unlock()
	assert.Equal(t, [][]int{{0}, {1, 2, 3}, {4, 5, 6}, {7}}, batchesA, "arrival order, at most 3 a batch, 99 never sent")
	assert.Equal(t, []int{0, 1, 2, 3}, statesA, "the key's state kept from batch to batch")

	// Idle groups are deleted (their drains returned): none is left.
	require.Eventually(t, func() bool { r.k.mu.Lock(); defer r.k.mu.Unlock(); return len(r.k.groups) == 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 70, recv(t, r.do(ctx, "a", 7)).ans)
	r.mu.Lock()
	assert.Equal(t, 0, r.states[len(r.states)-1], "a new group starts with the zero state")
	r.mu.Unlock()
}

// TestKeyedLeaveTaken: a caller whose batch was taken leaves at its ctx
// with an error saying the outcome is unknown, while the batch goes on;
// the batch's ctx carries the first call's values and is cancelled only
// once every caller of the batch has left.
func TestKeyedLeaveTaken(t *testing.T) {
	r := newKeyedRig(8)
	type ctxKey struct{}
	gate := make(chan struct{})
	inSend := make(chan context.Context, 1)
	step := make(chan struct{})
	r.hold = func(ctx context.Context, batch []*Call[int, int]) {
		switch batch[0].Req {
		case 0:
			<-gate
		case 1:
			inSend <- ctx
			<-step // B left; C has not
			<-ctx.Done()
		}
	}
	ctx := context.Background()
	first := r.do(ctx, "k", 0)
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) == 1 }, 5*time.Second, time.Millisecond)
	ctxB, cancelB := context.WithCancel(context.WithValue(ctx, ctxKey{}, "B"))
	ctxC, cancelC := context.WithCancel(ctx)
	defer cancelC()
	b := r.do(ctxB, "k", 1)
	require.Eventually(t, func() bool { n, _ := r.queued("k"); return n == 1 }, 5*time.Second, time.Millisecond)
	c := r.do(ctxC, "k", 2)
	require.Eventually(t, func() bool { n, _ := r.queued("k"); return n == 2 }, 5*time.Second, time.Millisecond)
	close(gate)
	require.NoError(t, recv(t, first).err)

	sendCtx := <-inSend
	assert.Equal(t, "B", sendCtx.Value(ctxKey{}), "the first call's values")
	cancelB()
	res := recv(t, b)
	require.ErrorIs(t, res.err, context.Canceled)
	assert.NotSame(t, context.Canceled, res.err)
	assert.Contains(t, res.err.Error(), "outcome unknown")
	assert.NoError(t, sendCtx.Err(), "C is still waiting: the batch goes on")
	close(step)
	cancelC()
	// C's leaving cancels the batch, which then returns: C gets either
	// its answer or the unknown outcome.
	if res = recv(t, c); res.err != nil {
		require.ErrorIs(t, res.err, context.Canceled)
		assert.Contains(t, res.err.Error(), "outcome unknown")
	} else {
		assert.Equal(t, 20, res.ans)
	}
	select {
	case <-sendCtx.Done(): // every caller left
	case <-time.After(5 * time.Second):
		t.Fatal("the batch's ctx was not cancelled once every caller left")
	}
	require.Eventually(t, func() bool { _, ok := r.queued("k"); return !ok }, 5*time.Second, time.Millisecond, "the idle group is deleted")
}

// TestKeyedGather: after a batch of several calls, the drain yields while
// fewer calls than that wait, at most gatherRounds times, so that callers
// coming back at once ride the next batch together; after a batch of one
// it does not yield.
func TestKeyedGather(t *testing.T) {
	r := newKeyedRig(8)
	ctx := context.Background()
	var yields int
	var back []<-chan result // the calls that "come back" during a yield
	next := 4
	r.k.yield = func() { // runs on the drain goroutine, between batches
		yields++
		if next <= 5 {
			back = append(back, r.do(ctx, "k", next))
			next++
			want := len(back)
			require.Eventually(t, func() bool { n, _ := r.queued("k"); return n == want }, 5*time.Second, time.Millisecond)
		}
	}
	gate := make(chan struct{})
	r.hold = func(_ context.Context, batch []*Call[int, int]) {
		if batch[0].Req == 0 {
			<-gate
		}
	}
	first := r.do(ctx, "k", 0)
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) == 1 }, 5*time.Second, time.Millisecond)
	var chs []<-chan result
	for i := 1; i <= 3; i++ {
		chs = append(chs, r.do(ctx, "k", i))
		require.Eventually(t, func() bool { n, _ := r.queued("k"); return n == i }, 5*time.Second, time.Millisecond)
	}
	close(gate)
	require.NoError(t, recv(t, first).err)
	for _, ch := range chs {
		require.NoError(t, recv(t, ch).err)
	}
	require.Eventually(t, func() bool { _, ok := r.queued("k"); return !ok }, 5*time.Second, time.Millisecond, "the group ends")
	for i, ch := range back {
		res := recv(t, ch)
		require.NoError(t, res.err)
		assert.Equal(t, (4+i)*10, res.ans)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Equal(t, [][]int{{0}, {1, 2, 3}, {4, 5}}, r.batches, "4 and 5, back during the yields after 1-3, in one batch")
	assert.Equal(t, 2*gatherRounds, yields, "none after the lone 0; after 1-3 and after 4-5, gatherRounds each, as fewer calls came back")
}
