package lockkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/lockmgr/lockkit"
)

func TestWatchLostOnFailedCheck(t *testing.T) {
	var checks atomic.Int32
	w := lockkit.NewWatch(time.Millisecond, time.Second, func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		assert.True(t, ok, "a check runs bounded by the timeout")
		if checks.Add(1) == 3 {
			return errors.New("connection gone")
		}
		return nil
	})
	select {
	case <-w.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed after a failed check")
	}
	require.Equal(t, int32(3), checks.Load(), "checks stop at the first failure")
	w.Stop() // after Lost, Stop returns at once
}

func TestWatchStopWaitsForCheck(t *testing.T) {
	started, finish := make(chan struct{}), make(chan struct{})
	var running atomic.Bool
	w := lockkit.NewWatch(time.Millisecond, time.Minute, func(context.Context) error {
		running.Store(true)
		select {
		case started <- struct{}{}:
			<-finish
		default:
		}
		running.Store(false)
		return nil
	})
	<-started
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a check was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(finish)
	<-stopped
	require.False(t, running.Load(), "no check runs once Stop returned")
	select {
	case <-w.Lost():
		t.Fatal("Stop closed Lost")
	default:
	}
}
