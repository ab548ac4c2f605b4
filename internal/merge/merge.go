// Package merge merges concurrent calls into batches, as luascript and
// tiered send them to Redis: one script call in flight per group (a Cluster
// slot, say) at a time, and the calls that arrive meanwhile sent together
// when it returns.
//
// A call that finds its group idle runs at once, alone (the lone function),
// and marks the group busy: a lone call waits for nothing. A call that
// finds it busy queues. When the call in flight returns, a drain goroutine
// sends what queued meanwhile (up to the batch bound, skipping those whose
// ctx ended, and only calls that may join the batch's first) with the send
// function, which sets each call's answer, and repeats until the queue is
// empty, then marks the group idle. No call ever waits for anything but the
// call in flight.
//
// [Keyed] merges the calls of groups named by a key instead (a SKU, as
// optimistic and tiered's fallback write to SQL), made on demand and
// deleted when idle, and sends every call from a drain goroutine.
package merge

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one queued call: its request, and its answer once its batch was
// sent.
type Call[Q, A any] struct {
	Ctx context.Context
	Req Q
	// Ans is set by the send function before it returns.
	Ans  A
	sent bool // taken into a batch; guarded by the group's mu
	done chan struct{}
}

// group is the queue of one group.
type group[Q, A any] struct {
	mu    sync.Mutex
	busy  bool          // a call or batch of the group is in flight
	queue []*Call[Q, A] // calls waiting for it, in arrival order
}

// Queue merges the calls of each of its groups.
type Queue[Q, A any] struct {
	groups []atomic.Pointer[group[Q, A]]
	max    int
	join   func(first, next Q) bool
	lone   func(ctx context.Context, req Q) A
	send   func(batch []*Call[Q, A])
}

// New returns a Queue of n groups whose batches hold at most max calls.
// join reports whether next may go in a batch whose first call is first
// (nil: always); lone runs a call alone, at once, with its own ctx; send
// sends a batch (of one call or more, in arrival order) and sets each
// call's Ans.
func New[Q, A any](n, max int, join func(first, next Q) bool, lone func(ctx context.Context, req Q) A,
	send func(batch []*Call[Q, A])) *Queue[Q, A] {
	return &Queue[Q, A]{groups: make([]atomic.Pointer[group[Q, A]], n), max: max, join: join, lone: lone, send: send}
}

// group returns group i.
func (qu *Queue[Q, A]) group(i int) *group[Q, A] {
	p := &qu.groups[i]
	if g := p.Load(); g != nil {
		return g
	}
	p.CompareAndSwap(nil, new(group[Q, A]))
	return p.Load()
}

// Do runs req in group i, alone or merged, and returns its answer. Its
// error is non-nil only when ctx ended before the answer came: wrapping
// ctx's error alone when req was never sent (it took no effect), or saying
// that its outcome is unknown when its batch was sent.
func (qu *Queue[Q, A]) Do(ctx context.Context, i int, req Q) (A, error) {
	g := qu.group(i)
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		a := qu.lone(ctx, req)
		qu.next(g)
		return a, nil
	}
	c := &Call[Q, A]{Ctx: ctx, Req: req, done: make(chan struct{})}
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	return wait(&g.mu, &g.queue, c)
}

// Unknown is the text of the error of a call whose ctx ended after its
// batch was sent: true of keyed and unkeyed calls alike.
const Unknown = "merged into a batch that was sent, outcome unknown: it may have taken effect, so only a call with an idempotency key may be retried safely (with the same key)"

// wait waits for the answer of c, queued in *queue (both guarded by mu),
// until its ctx ends; then it takes c out of the queue if no batch took it
// and returns ctx's error, wrapped with [Unknown] if its batch was sent and
// has not returned.
func wait[Q, A any](mu *sync.Mutex, queue *[]*Call[Q, A], c *Call[Q, A]) (A, error) {
	select {
	case <-c.done:
		return c.Ans, nil
	case <-c.Ctx.Done():
	}
	mu.Lock()
	sent := c.sent
	if !sent {
		if i := slices.Index(*queue, c); i >= 0 {
			*queue = slices.Delete(*queue, i, i+1)
		}
	}
	mu.Unlock()
	var zero A
	if !sent {
		return zero, c.Ctx.Err() // never sent: nothing taken
	}
	select {
	case <-c.done:
		return c.Ans, nil
	default:
	}
	return zero, fmt.Errorf("%w: %s", c.Ctx.Err(), Unknown)
}

// take appends to batch the calls of *queue that go in the next batch, in
// arrival order, marking them sent: up to max calls, and only those that
// may join the first (join nil: all). It drops the calls whose ctx ended
// (never sent) and leaves the others queued. The caller holds the queue's
// lock.
func take[Q, A any](queue *[]*Call[Q, A], batch []*Call[Q, A], max int, join func(first, next Q) bool) []*Call[Q, A] {
	q := *queue
	keep := q[:0]
	for _, c := range q {
		switch {
		case c.Ctx.Err() != nil: // leaves unsent
		case len(batch) < max && (len(batch) == 0 || join == nil || join(batch[0].Req, c.Req)):
			c.sent = true
			batch = append(batch, c)
		default:
			keep = append(keep, c)
		}
	}
	clear(q[len(keep):])
	*queue = keep
	return batch
}

// next starts a drain of g when calls queued, or marks g idle.
func (qu *Queue[Q, A]) next(g *group[Q, A]) {
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.busy = false
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go qu.drain(g)
}

// drain sends the queue of g in batches until it is empty.
func (qu *Queue[Q, A]) drain(g *group[Q, A]) {
	var batch []*Call[Q, A]
	for {
		g.mu.Lock()
		batch = take(&g.queue, batch[:0], qu.max, qu.join)
		if len(batch) == 0 {
			g.busy = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		qu.send(batch)
		for _, c := range batch {
			close(c.done)
		}
		clear(batch)
	}
}

// Context returns the context a batch runs with: the values of its first
// call's, with no cancellation, and the latest deadline of its calls (none
// when one of them has none). A caller whose own ctx ends first returns at
// once without waiting for the batch.
func Context[Q, A any](batch []*Call[Q, A]) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(batch[0].Ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.Ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}

// Len returns how many calls wait in group i, not yet sent (for tests that
// build a batch).
func (qu *Queue[Q, A]) Len(i int) int {
	g := qu.group(i)
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}
