package merge

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
)

// Keyed merges concurrent calls into batches per key, as optimistic and
// tiered's fallback write one SKU's calls to SQL: one batch of a key in
// flight at a time, and the calls that arrive meanwhile sent together, in
// arrival order, up to the batch bound, when it returns (after a few
// scheduler rounds for its callers to come back: see Keyed.gather).
//
// Unlike [Queue], a key's group is made by its first call and deleted as
// soon as its queue is empty, so the keys seen once (100,000 SKUs) are not
// kept; and every call, a lone one too, is sent by the group's drain
// goroutine, never by its caller, so that each caller may leave at its own
// deadline while the batch's statements run. The drain runs while the
// group has calls, then ends: no goroutine outlives the calls.
type Keyed[K comparable, S, Q, A any] struct {
	mu     sync.Mutex
	groups map[K]*keyed[S, Q, A]
	max    int
	send   func(ctx context.Context, key K, state *S, batch []*Call[Q, A])
	yield  func() // runtime.Gosched; tests replace it
}

// keyed is the group of one key.
type keyed[S, Q, A any] struct {
	queue []*Call[Q, A] // calls not yet taken, in arrival order; guarded by Keyed.mu
	state S             // the send function's; only the drain uses it
}

// NewKeyed returns a Keyed whose batches hold at most max calls. send
// sends a batch of key (of one call or more, in arrival order) and sets
// each call's Ans; it must not modify the batch slice. Its ctx has the
// values of the first call's ctx and is cancelled once every call of the
// batch has left (its ctx ended). state is the key's own, kept from batch
// to batch while the group lives (its zero value once the key was idle).
func NewKeyed[K comparable, S, Q, A any](max int, send func(ctx context.Context, key K, state *S, batch []*Call[Q, A])) *Keyed[K, S, Q, A] {
	return &Keyed[K, S, Q, A]{groups: map[K]*keyed[S, Q, A]{}, max: max, send: send, yield: runtime.Gosched}
}

// Do queues req in the group of key, starting its drain if it has none,
// and returns its answer. Its error is non-nil only when ctx ended before
// the answer came: ctx's error alone when req was never taken into a
// batch (it took no effect), or wrapping it and saying that the outcome is
// unknown when its batch was being sent (it may take effect).
func (k *Keyed[K, S, Q, A]) Do(ctx context.Context, key K, req Q) (A, error) {
	c := &Call[Q, A]{Ctx: ctx, Req: req, done: make(chan struct{})}
	k.mu.Lock()
	g := k.groups[key]
	if g == nil {
		g = new(keyed[S, Q, A])
		k.groups[key] = g
		go k.drain(key, g)
	}
	g.queue = append(g.queue, c)
	k.mu.Unlock()
	return wait(&k.mu, &g.queue, c)
}

// Len returns how many calls of key wait, not yet taken into a batch
// (for tests that build a batch).
func (k *Keyed[K, S, Q, A]) Len(key K) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if g := k.groups[key]; g != nil {
		return len(g.queue)
	}
	return 0
}

// drain sends the queue of g in batches until it is empty, then deletes g.
func (k *Keyed[K, S, Q, A]) drain(key K, g *keyed[S, Q, A]) {
	var batch []*Call[Q, A]
	for {
		k.mu.Lock()
		batch = take(&g.queue, batch[:0], k.max, nil)
		if len(batch) == 0 {
			delete(k.groups, key)
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		ctx, cancel := live(batch)
		k.send(ctx, key, &g.state, batch)
		cancel()
		for _, c := range batch {
			close(c.done)
		}
		n := len(batch)
		clear(batch)
		k.gather(g, n)
	}
}

// gatherRounds bounds how often a drain yields to let the callers it just
// answered come back (see Keyed.gather).
const gatherRounds = 2

// gather lets the callers of the batch of n calls just answered queue their
// next calls before the next batch is taken, when the key is contended
// (n > 1) and fewer than n calls wait: it yields the processor (k.yield),
// at most gatherRounds times. Callers that call again as soon as they are
// answered (a worker loop) then ride one batch together, instead of
// splitting into two halves that take turns, each waiting for the other's
// batch as well as its own. A key whose callers do not come back at once
// loses a few scheduler rounds, no timer.
func (k *Keyed[K, S, Q, A]) gather(g *keyed[S, Q, A], n int) {
	if n < 2 {
		return
	}
	for range gatherRounds {
		k.mu.Lock()
		q := len(g.queue)
		k.mu.Unlock()
		if q >= n {
			return
		}
		k.yield()
	}
}

// live returns the context batch runs with in Keyed: the values of its
// first call's ctx, cancelled once every call's ctx has ended, or by the
// cancel function, which must be called. A lone call's is its own ctx's
// child (no watcher to set up).
func live[Q, A any](batch []*Call[Q, A]) (context.Context, context.CancelFunc) {
	if len(batch) == 1 {
		return context.WithCancel(batch[0].Ctx) // ends with its one caller's
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].Ctx))
	var n atomic.Int32
	n.Store(int32(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.Ctx, func() {
			if n.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
