package merge

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueueLeaveSent: a caller whose batch was sent leaves at its ctx with
// ctx's error and the unknown outcome, in words true of an unkeyed call as
// of a keyed one: it may have taken effect, and only a keyed call may be
// retried safely. A caller that leaves before its batch is sent gets ctx's
// error alone.
func TestQueueLeaveSent(t *testing.T) {
	lone := make(chan struct{})
	sent := make(chan struct{})
	release := make(chan struct{})
	q := New(1, 8, nil,
		func(ctx context.Context, req int) int { <-lone; return req },
		func(batch []*Call[int, int]) {
			close(sent)
			<-release
			for _, c := range batch {
				c.Ans = c.Req
			}
		})
	first := make(chan error, 1)
	go func() { _, err := q.Do(context.Background(), 0, 1); first <- err }()
	require.Eventually(t, func() bool { g := q.group(0); g.mu.Lock(); defer g.mu.Unlock(); return g.busy }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { _, err := q.Do(ctx, 0, 2); second <- err }()
	require.Eventually(t, func() bool { g := q.group(0); g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 1 }, 5*time.Second, time.Millisecond)
	close(lone)
	require.NoError(t, <-first)
	<-sent
	cancel()
	err := <-second
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "may have taken effect")
	assert.NotContains(t, err.Error(), "(retry with the same key)", "an unkeyed caller has no key to retry with")
	assert.NotContains(t, err.Error(), "Redis", "the queue serves SQL strategies too")
	close(release)

	// Never sent: ctx's error alone.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	block := make(chan struct{})
	q2 := New(1, 8, nil, func(ctx context.Context, req int) int { <-block; return req }, func(batch []*Call[int, int]) {})
	go func() { _, _ = q2.Do(context.Background(), 0, 1) }()
	require.Eventually(t, func() bool { g := q2.group(0); g.mu.Lock(); defer g.mu.Unlock(); return g.busy }, 5*time.Second, time.Millisecond)
	_, err = q2.Do(ctx2, 0, 2)
	require.Same(t, context.Canceled, err)
	close(block)
}
