package lockkit

import (
	"context"
	"sync"
)

// Queue lines up the callers of one process per name, so that only a few
// of them at a time (the depth) contend for a lock that other processes
// share: a crowd of buyers in one process costs the lock server a short
// line, not thousands of contenders. [NewQueuedLocker] puts one in front
// of a lock; the lockers of sqllock, redislock, redlock and zklock are made
// so. A Queue is safe for concurrent use; its zero value is not
// usable, make one with [NewQueue].
//
// Callers are admitted in arrival order (Go serves goroutines blocked on a
// channel send first in, first out). A caller done with a held lease may
// hand it, still held, to the next caller waiting in [Queue.Enter], saving
// the lock server a release and an acquire; after [QueueConfig.MaxHandOvers]
// hand-overs in a row the lease is released for real, so that other
// processes get their turn. A name's entry exists only while callers are at
// it.
type Queue[L any] struct {
	cfg QueueConfig

	mu    sync.Mutex
	lines map[string]*line[L]
}

// QueueConfig configures a [Queue].
type QueueConfig struct {
	// Depth is how many callers per name are admitted at once, holders and
	// contenders; the others wait in the queue. Below 1 means 1.
	Depth int

	// MaxHandOvers bounds how many times in a row a held lease passes to
	// the next caller of the process; 0 turns hand-over off.
	MaxHandOvers int

	// Cleanup, if not nil, runs when the last caller leaves a name that a
	// caller marked with [Turn.Share], outside the Queue's lock, with the
	// ctx of that last caller.
	Cleanup func(ctx context.Context, name string)
}

// line is one name's queue.
type line[L any] struct {
	name    string
	slots   chan struct{}   // a token per admitted caller
	handoff chan handoff[L] // passes a held lease, and its slot, to a waiter
	callers int             // admitted or waiting, guarded by Queue.mu
	shared  bool            // a holder left the name to callers behind it
}

type handoff[L any] struct {
	lease L
	run   int // hand-overs in a row, this one included
}

// NewQueue returns an empty Queue.
func NewQueue[L any](cfg QueueConfig) *Queue[L] {
	cfg.Depth = max(cfg.Depth, 1)
	cfg.MaxHandOvers = max(cfg.MaxHandOvers, 0)
	return &Queue[L]{cfg: cfg, lines: map[string]*line[L]{}}
}

// Turn is a caller's place at a name, from [Queue.Enter] until it leaves
// with [Turn.Leave] or [Turn.HandOver].
type Turn[L any] struct {
	q   *Queue[L]
	l   *line[L]
	run int // hand-overs in a row that led to this turn
}

// Enter waits for the caller's turn at name, in arrival order, or until ctx
// is done (the error is ctx.Err()). When a caller handed over its lease,
// handed is true and lease is that lease, held; otherwise the caller is
// admitted and takes the lock itself.
func (q *Queue[L]) Enter(ctx context.Context, name string) (t *Turn[L], lease L, handed bool, err error) {
	q.mu.Lock()
	l := q.lines[name]
	if l == nil {
		l = &line[L]{name: name, slots: make(chan struct{}, q.cfg.Depth), handoff: make(chan handoff[L])}
		q.lines[name] = l
	}
	l.callers++
	q.mu.Unlock()
	select {
	case l.slots <- struct{}{}:
		return &Turn[L]{q: q, l: l}, lease, false, nil
	case h := <-l.handoff:
		return &Turn[L]{q: q, l: l, run: h.run}, h.lease, true, nil
	case <-ctx.Done():
		q.exit(ctx, l)
		return nil, lease, false, ctx.Err()
	}
}

// Len returns how many names have callers: for tests.
func (q *Queue[L]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines)
}

// Alone reports whether t's caller is the only caller of this process at
// its name, admitted or waiting.
func (t *Turn[L]) Alone() bool {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	return t.l.callers == 1
}

// Share reports whether other callers of this process are at t's name. If
// so it marks the name, so that the last of them to leave runs
// [QueueConfig.Cleanup]: a holder that leaves shared state (a lock
// directory) to the callers behind it relies on them to clean it up.
func (t *Turn[L]) Share() bool {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	if t.l.callers > 1 {
		t.l.shared = true
		return true
	}
	return false
}

// HandOver passes lease, still held, to the next caller waiting at t's
// name, together with t's place, and reports whether it did. It does not
// when hand-over is off, when the lease was handed over MaxHandOvers times
// in a row, or when nobody waits; the caller then releases the lease and
// calls Leave. After a hand-over, t is done: do not call Leave.
func (t *Turn[L]) HandOver(lease L) bool {
	if t.run >= t.q.cfg.MaxHandOvers {
		return false
	}
	select {
	case t.l.handoff <- handoff[L]{lease: lease, run: t.run + 1}:
	default:
		return false
	}
	t.q.exit(context.Background(), t.l)
	return true
}

// Leave gives up t's place, letting the next caller in; ctx bounds the
// cleanup, if any (see [QueueConfig.Cleanup]).
func (t *Turn[L]) Leave(ctx context.Context) {
	<-t.l.slots
	t.q.exit(ctx, t.l)
}

// exit takes a caller off l, deleting the entry when it was the last.
func (q *Queue[L]) exit(ctx context.Context, l *line[L]) {
	q.mu.Lock()
	l.callers--
	last := l.callers == 0
	if last {
		delete(q.lines, l.name)
	}
	cleanup := last && l.shared
	q.mu.Unlock()
	if cleanup && q.cfg.Cleanup != nil {
		q.cfg.Cleanup(ctx, l.name)
	}
}
