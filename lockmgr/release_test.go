package lockmgr_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/lockmgr"
)

// stuckLocker's leases take until unblock closes to Release, as a Release
// over a stalled network does.
type stuckLocker struct {
	*fakeLocker
	unblock  chan struct{}
	released chan struct{}
}

type stuckLease struct {
	lockmgr.Lease
	l stuckLocker
}

func (l stuckLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	le, err := l.fakeLocker.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return stuckLease{le, l}, nil
}

func (le stuckLease) Release(ctx context.Context) error {
	defer close(le.l.released)
	<-le.l.unblock
	return le.Lease.Release(ctx)
}

func newStuckLocker() stuckLocker {
	return stuckLocker{newFakeLocker(0), make(chan struct{}), make(chan struct{})}
}

// TestStuckReleaseKeepsNoOneWaitingPastCtx: a call waits for its Release
// while its ctx lives, and no longer: the Release goes on without it.
func TestStuckReleaseKeepsNoOneWaitingPastCtx(t *testing.T) {
	t.Run("ctx done", func(t *testing.T) {
		l := newStuckLocker()
		m := lockmgr.MustNew(l, newMemStore())
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, m.Init(ctx, "shoe", 5))
		lockmgr.SetBeforeWrite(m, func(string) { cancel() })
		done := make(chan error, 1)
		go func() { _, err := m.Reduce(ctx, "shoe", 1); done <- err }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("the call waited for its Release past its ctx")
		}
		close(l.unblock)
		<-l.released
	})
	t.Run("ctx live", func(t *testing.T) {
		l := newStuckLocker()
		m := lockmgr.MustNew(l, newMemStore())
		ctx := context.Background()
		require.NoError(t, m.Init(ctx, "shoe", 5))
		done := make(chan error, 1)
		go func() { _, err := m.Reduce(ctx, "shoe", 1); done <- err }()
		select {
		case <-done:
			t.Fatal("the call returned before its Release")
		case <-time.After(50 * time.Millisecond):
		}
		close(l.unblock)
		require.NoError(t, <-done)
		select {
		case <-l.released:
		default:
			t.Fatal("the call returned before its Release")
		}
	})
}
