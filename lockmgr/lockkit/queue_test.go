package lockkit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/lockmgr/lockkit"
)

// waitFor waits until cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond)
}

// goEnter enters q's line for name in a new goroutine of wg and, once its
// turn comes, runs f with what Enter returned; a failed Enter fails t.
func goEnter[L any](t *testing.T, wg *sync.WaitGroup, q *lockkit.Queue[L], ctx context.Context, name string,
	f func(tu *lockkit.Turn[L], lease L, handed bool)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		tu, lease, handed, err := q.Enter(ctx, name)
		if err != nil {
			t.Error(err)
			return
		}
		f(tu, lease, handed)
	}()
}

func TestQueueFIFO(t *testing.T) {
	q := lockkit.NewQueue[int](lockkit.QueueConfig{Depth: 1})
	ctx := context.Background()
	first, _, _, err := q.Enter(ctx, "a")
	require.NoError(t, err)
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 20 {
		goEnter(t, &wg, q, ctx, "a", func(tu *lockkit.Turn[int], _ int, _ bool) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			tu.Leave(ctx)
		})
		// Start the next only once this one blocks: its send is queued.
		time.Sleep(10 * time.Millisecond)
	}
	first.Leave(ctx)
	wg.Wait()
	for i, v := range order {
		require.Equal(t, i, v, "served in arrival order: %v", order)
	}
	require.Zero(t, q.Len())
}

func TestQueueDepth(t *testing.T) {
	q := lockkit.NewQueue[int](lockkit.QueueConfig{Depth: 3})
	ctx := context.Background()
	var in, peak atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		goEnter(t, &wg, q, ctx, "a", func(tu *lockkit.Turn[int], _ int, _ bool) {
			n := in.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			in.Add(-1)
			tu.Leave(ctx)
		})
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int32(3))
	require.Zero(t, q.Len())
}

func TestQueueHandOverBound(t *testing.T) {
	const bound = 4
	q := lockkit.NewQueue[string](lockkit.QueueConfig{Depth: 1, MaxHandOvers: bound})
	ctx := context.Background()
	tu, _, handed, err := q.Enter(ctx, "a")
	require.NoError(t, err)
	require.False(t, handed)
	// A line of waiters; each receives the lease and tries to pass it on.
	const waiters = 10
	results := make(chan bool, waiters)
	var wg sync.WaitGroup
	for range waiters {
		goEnter(t, &wg, q, ctx, "a", func(tu *lockkit.Turn[string], lease string, handed bool) {
			results <- handed
			if handed && lease != "L" {
				t.Errorf("handed lease %q", lease)
			}
			waitFor(t, func() bool { return q.Len() == 1 })
			if !tu.HandOver("L") {
				tu.Leave(ctx)
			}
		})
	}
	// Wait until all waiters are blocked, then hand over.
	time.Sleep(100 * time.Millisecond)
	require.True(t, tu.HandOver("L"), "a waiter is there")
	wg.Wait()
	close(results)
	var runs []bool
	for h := range results {
		runs = append(runs, h)
	}
	// bound hand-overs in a row, then a real release, and so on.
	want := []bool{true, true, true, true, false, true, true, true, true, false}
	require.Equal(t, want, runs)
	require.Zero(t, q.Len())
}

func TestQueueHandOverOff(t *testing.T) {
	q := lockkit.NewQueue[int](lockkit.QueueConfig{Depth: 1})
	ctx := context.Background()
	tu, _, _, err := q.Enter(ctx, "a")
	require.NoError(t, err)
	done := make(chan bool)
	go func() {
		tu2, _, handed, err := q.Enter(ctx, "a")
		if err == nil {
			tu2.Leave(ctx)
		}
		done <- handed
	}()
	time.Sleep(20 * time.Millisecond)
	require.False(t, tu.HandOver(1), "MaxHandOvers 0 turns hand-over off")
	tu.Leave(ctx)
	require.False(t, <-done)
	require.False(t, tu.HandOver(1), "nobody waits")
}

func TestQueueAloneAndShare(t *testing.T) {
	var cleaned []string
	var mu sync.Mutex
	q := lockkit.NewQueue[int](lockkit.QueueConfig{Depth: 2, Cleanup: func(_ context.Context, name string) {
		mu.Lock()
		cleaned = append(cleaned, name)
		mu.Unlock()
	}})
	ctx := context.Background()
	a, _, _, err := q.Enter(ctx, "a")
	require.NoError(t, err)
	require.True(t, a.Alone())
	require.False(t, a.Share(), "nobody else")
	b, _, _, err := q.Enter(ctx, "a")
	require.NoError(t, err)
	require.False(t, a.Alone())
	other, _, _, err := q.Enter(ctx, "other")
	require.NoError(t, err)
	require.True(t, other.Alone(), "names are apart")
	other.Leave(ctx)
	require.True(t, a.Share())
	a.Leave(ctx)
	require.True(t, b.Alone())
	require.Empty(t, cleaned, "b is still there")
	b.Leave(ctx)
	require.Equal(t, []string{"a"}, cleaned, "the last out of a shared name cleans up; other was never shared")
	require.Zero(t, q.Len())
}

func TestQueueCtx(t *testing.T) {
	cleaned := 0
	q := lockkit.NewQueue[int](lockkit.QueueConfig{Depth: 1, Cleanup: func(context.Context, string) { cleaned++ }})
	ctx := context.Background()
	a, _, _, err := q.Enter(ctx, "a")
	require.NoError(t, err)
	b, _, _, err := func() (*lockkit.Turn[int], int, bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		return q.Enter(cctx, "a")
	}()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, b)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, _, err = q.Enter(cctx, "a")
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, q.Len())

	// A waiter that gives up is off the line: a marked name is cleaned up
	// once, by the last caller out.
	c := make(chan error)
	cctx, cancel = context.WithCancel(ctx)
	go func() { _, _, _, err := q.Enter(cctx, "a"); c <- err }()
	waitFor(t, func() bool { return !a.Alone() })
	require.True(t, a.Share())
	cancel()
	require.ErrorIs(t, <-c, context.Canceled)
	require.True(t, a.Alone())
	require.Zero(t, cleaned)
	a.Leave(ctx)
	require.Equal(t, 1, cleaned)
	require.Zero(t, q.Len())
}

func TestQueueNoGrowth(t *testing.T) {
	q := lockkit.NewQueue[int](lockkit.QueueConfig{Depth: 1, MaxHandOvers: 16})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				tu, _, _, err := q.Enter(ctx, fmt.Sprint("sku-", (g*2000+i)%500))
				if err != nil {
					t.Error(err)
					return
				}
				if !tu.HandOver(i) {
					tu.Leave(ctx)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, q.Len(), "entries go with their last caller")
}
