package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script answers the calls of a test one by one, recording the options
// each got.
type script struct {
	answers []error
	keys    []string
}

func (s *script) call(_ context.Context, opts ...inventory.Option) (int64, error) {
	s.keys = append(s.keys, driver.Apply(opts).Key)
	n := len(s.keys) - 1
	if n >= len(s.answers) {
		return int64(n), nil
	}
	return int64(n), s.answers[n]
}

var fast = retry.WithBackoff(time.Microsecond, time.Millisecond)

func TestRetryable(t *testing.T) {
	unknown := errors.New("read tcp: i/o timeout")
	for _, c := range []struct {
		err   error
		keyed bool
		want  bool
	}{
		{nil, true, false},
		{fmt.Errorf("x: %w", inventory.ErrInsufficientStock), true, false},
		{&inventory.InsufficientError{}, true, false},
		{inventory.ErrNotFound, true, false},
		{inventory.ErrHoldNotFound, true, false},
		{inventory.ErrInvalidArgument, true, false},
		{inventory.ErrDuplicate, true, false},
		{inventory.ErrHoldReleased, true, false},
		{inventory.ErrHoldConfirmed, true, false},
		{fmt.Errorf("lock: %w", inventory.ErrContention), false, true},
		{unknown, false, false},
		{unknown, true, true},
		{context.DeadlineExceeded, true, true},
	} {
		assert.Equal(t, c.want, retry.Retryable(c.err, c.keyed), "%v keyed=%v", c.err, c.keyed)
	}
}

// TestDo: contention is retried unkeyed, an unknown outcome only keyed,
// a verdict never; the same key goes with every attempt.
func TestDo(t *testing.T) {
	ctx := context.Background()
	unknown := errors.New("read tcp: i/o timeout")

	s := &script{answers: []error{inventory.ErrContention, inventory.ErrContention}}
	n, err := retry.Do(ctx, "", s.call, fast)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{"", "", ""}, s.keys, "no key was made up")

	s = &script{answers: []error{unknown}}
	_, err = retry.Do(ctx, "", s.call, fast)
	require.ErrorIs(t, err, unknown, "an unkeyed call that may have taken effect is not made again")
	require.Len(t, s.keys, 1)

	s = &script{answers: []error{unknown, inventory.ErrDuplicate}}
	n, err = retry.Do(ctx, "buyer-1", s.call, fast)
	require.ErrorIs(t, err, inventory.ErrDuplicate, "the first call took effect: its repeat says so")
	require.NotErrorIs(t, err, unknown)
	require.EqualValues(t, 1, n)
	require.Equal(t, []string{"buyer-1", "buyer-1"}, s.keys, "the key goes with every attempt")

	s = &script{answers: []error{inventory.ErrInsufficientStock}}
	_, err = retry.Do(ctx, "buyer-2", s.call, fast)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.Len(t, s.keys, 1, "a verdict is final")

	s = &script{answers: []error{unknown, unknown, unknown, unknown}}
	_, err = retry.Do(ctx, "buyer-3", s.call, fast, retry.WithAttempts(3))
	require.Equal(t, unknown, err, "the last attempt's error, as it was")
	require.Len(t, s.keys, 3)
}

// TestDoStopsWithCtx: a ctx that ends during a pause ends the retries at
// once, with the last call's error and ctx's.
func TestDoStopsWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &script{answers: []error{inventory.ErrContention, inventory.ErrContention}}
	calls := 0
	called := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := retry.Do(ctx, "", func(ctx context.Context, opts ...inventory.Option) (int64, error) {
			calls++
			close(called) // a second call would panic
			return s.call(ctx, opts...)
		}, retry.WithBackoff(time.Hour, time.Hour))
		done <- err
	}()
	<-called
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, inventory.ErrContention, "the call's own error is kept")
		require.Equal(t, 1, calls)
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not return when ctx ended")
	}

	// A done ctx: the first call is made (it reports ctx's error itself),
	// and never again.
	calls = 0
	_, err := retry.Do(ctx, "k", func(ctx context.Context, _ ...inventory.Option) (int64, error) {
		calls++
		return 0, ctx.Err()
	}, fast)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, calls)
}

func TestRunAndOptions(t *testing.T) {
	ctx := context.Background()
	tries := 0
	err := retry.Run(ctx, "hold-1", func(ctx context.Context, _ ...inventory.Option) error {
		tries++
		if tries == 1 {
			return inventory.ErrContention
		}
		return nil
	}, fast)
	require.NoError(t, err)
	require.Equal(t, 2, tries)

	never := func(context.Context, ...inventory.Option) error { t.Fatal("called"); return nil }
	for _, o := range []retry.Option{retry.WithAttempts(0), retry.WithBackoff(0, time.Second), retry.WithBackoff(time.Second, time.Millisecond)} {
		require.ErrorIs(t, retry.Run(ctx, "", never, o), inventory.ErrInvalidArgument)
	}
	require.NoError(t, retry.Run(ctx, "", func(context.Context, ...inventory.Option) error { return nil }, nil), "a nil option is ignored")
}
