//go:build !race

// This test cuts connections while waiters watch their predecessors, which
// trips a known data race inside go-zookeeper (lastZxid, read by
// sendSetWatches while recvLoop writes it: go-zookeeper/zk#35), so it runs
// only without the race detector.

package zklock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/zklock"
)

// TestFlakyConnection takes and frees locks while the connection keeps
// dropping: whatever fails, no node is left behind to block the line.
func TestFlakyConnection(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a := connect(t)
	r := root(t, a.conn)
	l := locker(t, a.conn, zklock.WithRoot(r), zklock.WithSessionEvents(a.events), zklock.WithAcquireTimeout(2*time.Second))
	stop := make(chan struct{})
	var ok, failed, cuts atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				lease, err := l.Acquire(ctx, "flaky")
				if err != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				_ = lease.Release(ctx)
			}
		})
	}
	// go-zookeeper waits a second before it reconnects to a lone server.
	for range 4 {
		time.Sleep(1500 * time.Millisecond)
		a.cut(false)
		cuts.Add(1)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d locks taken, %d attempts failed, over %d cuts of the connection", ok.Load(), failed.Load(), cuts.Load())
	require.Positive(t, failed.Load(), "the cuts broke some calls")
	require.Eventually(t, func() bool { return a.conn.State() == zk.StateHasSession }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, nodes(t, a.conn, r, "flaky"), "nodes left behind")
	lease, err := l.Acquire(ctx, "flaky")
	require.NoError(t, err, "the lock is free")
	require.NoError(t, lease.Release(ctx))
}
