package lockkit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockkit"
)

// innerLease is a lease of a fake backend: it records its Release.
type innerLease struct {
	lost     chan struct{}
	released int
	log      *[]string
	mu       *sync.Mutex
}

func (l *innerLease) Lost() <-chan struct{} { return l.lost }

func (l *innerLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released++
	*l.log = append(*l.log, "release")
	return nil
}

// fakeBackend is a TakeFunc that hands out innerLeases and counts takes.
type fakeBackend struct {
	mu    sync.Mutex
	taken []*innerLease
	log   []string
	err   error
}

func (b *fakeBackend) take(_, _ context.Context, _ string, _ *lockkit.Turn[*innerLease]) (*innerLease, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	b.log = append(b.log, "take")
	le := &innerLease{lost: make(chan struct{}), log: &b.log, mu: &b.mu}
	b.taken = append(b.taken, le)
	return le, nil
}

// acquireAsync acquires "a" on l in a goroutine and sends the lease to got.
func acquireAsync(t *testing.T, l lockmgr.Locker, got chan<- lockmgr.Lease) {
	go func() {
		le, err := l.Acquire(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		got <- le
	}()
}

func newQueued(t *testing.T, b *fakeBackend, handOvers int, timeout time.Duration) lockmgr.Locker {
	t.Helper()
	l, err := lockkit.NewQueuedLocker(lockkit.QueuedConfig{Name: "fake", AcquireTimeout: timeout,
		Queue: lockkit.QueueConfig{Depth: 1, MaxHandOvers: handOvers}}, b.take)
	require.NoError(t, err)
	return l
}

// TestQueuedLockerHandOver: a lease released while another caller waits
// passes to it still held (no take, no release of the inner lease), at
// most MaxHandOvers times in a row; a lost lease is never handed over.
func TestQueuedLockerHandOver(t *testing.T) {
	ctx := context.Background()
	b := &fakeBackend{}
	l := newQueued(t, b, 2, time.Minute)

	first, err := l.Acquire(ctx, "a")
	require.NoError(t, err)
	// Three waiters, admitted in turn by hand-overs.
	got := make(chan lockmgr.Lease, 3)
	for range 3 {
		acquireAsync(t, l, got)
	}
	waitFor(t, func() bool { return lockkit.QueuedCallers[*innerLease](l, "a") == 4 })
	require.Empty(t, got, "nobody got in while first holds")
	require.NoError(t, first.Release(ctx))
	second := <-got
	require.NoError(t, second.Release(ctx))
	third := <-got
	b.mu.Lock()
	require.Equal(t, []string{"take"}, b.log, "two hand-overs: one take, nothing released")
	b.mu.Unlock()
	// The third holder's lease was handed over twice in a row: it is
	// released for real, and the last waiter takes the lock anew.
	require.NoError(t, third.Release(ctx))
	fourth := <-got
	b.mu.Lock()
	require.Equal(t, []string{"take", "release", "take"}, b.log)
	b.mu.Unlock()

	// A lost lease is released, not handed over, even with waiters.
	acquireAsync(t, l, got)
	waitFor(t, func() bool { return lockkit.QueuedCallers[*innerLease](l, "a") == 2 })
	b.mu.Lock()
	inner := len(b.log)
	b.mu.Unlock()
	close(b.taken[len(b.taken)-1].lost) // fourth's
	require.NoError(t, fourth.Release(ctx))
	fifth := <-got
	b.mu.Lock()
	require.Equal(t, []string{"release", "take"}, b.log[inner:], "a lost lease is freed and taken anew")
	b.mu.Unlock()
	require.NoError(t, fifth.Release(ctx))
}

// TestQueuedLockerErrors: bad configuration is refused; a take that fails
// leaves the queue (the next caller gets in); a caller stuck in the queue
// past the acquire timeout gets ErrContention, one whose ctx ends gets
// ctx's error.
func TestQueuedLockerErrors(t *testing.T) {
	ctx := context.Background()
	b := &fakeBackend{}
	_, err := lockkit.NewQueuedLocker(lockkit.QueuedConfig{Name: "fake"}, b.take)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "no acquire timeout")
	_, err = lockkit.NewQueuedLocker[*innerLease](lockkit.QueuedConfig{Name: "fake", AcquireTimeout: time.Second}, nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "nil take")

	l := newQueued(t, b, 16, 100*time.Millisecond)
	b.err = errors.New("backend down")
	_, err = l.Acquire(ctx, "a")
	require.ErrorIs(t, err, b.err)
	b.err = nil
	held, err := l.Acquire(ctx, "a")
	require.NoError(t, err, "a failed take left the queue")

	_, err = l.Acquire(ctx, "a")
	require.ErrorIs(t, err, inventory.ErrContention, "queued past the acquire timeout")
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(cctx, "a")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, inventory.ErrContention, "the caller's own deadline is not contention")
	require.NoError(t, held.Release(ctx))
	require.Len(t, b.taken, 1, "the failed take made no lease")
	require.Equal(t, 1, b.taken[0].released)
}
