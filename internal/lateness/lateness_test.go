package lateness

import (
	"context"
	"testing"
	"time"

	inventory "github.com/stockkit/inventory"
)

// TestLateCountsALateCall checks that the scheduler watcher does not excuse
// a call that returns well past its deadline by itself: the watcher keeps
// running meanwhile, so the lateness is the call's own.
func TestLateCountsALateCall(t *testing.T) {
	const past = 300 * time.Millisecond
	late, sched, err := Late(20*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(past)
		return ctx.Err()
	})
	if err == nil {
		t.Fatal("the call's ctx did not end")
	}
	if own := late - sched; own <= inventory.DeadlineSlack {
		t.Errorf("a call %v late was counted %v late (returned %v late, scheduler delay %v): the check cannot fail",
			past, own, late, sched)
	}
	watch.mu.Lock()
	users := watch.users
	watch.mu.Unlock()
	if users != 0 {
		t.Errorf("the watcher has %d users after Late returned", users)
	}
}

// TestLateOnTime checks that a call returning at its deadline is not late.
func TestLateOnTime(t *testing.T) {
	_, err := CheckLate(t, "on time", 20*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if err == nil {
		t.Fatal("the call's ctx did not end")
	}
}

// TestLateEarlyReturn checks that a call that returns before its deadline
// ends Late at once: Late does not hold it until the deadline (an hour
// here) to probe the scheduler, and reports it as in time.
func TestLateEarlyReturn(t *testing.T) {
	done := make(chan struct{})
	var late, sched time.Duration
	go func() {
		defer close(done)
		late, sched, _ = Late(time.Hour, func(ctx context.Context) error { return nil })
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Late waited for the deadline of a call that had returned")
	}
	if late >= 0 || sched != 0 {
		t.Errorf("an early return: late %v, scheduler delay %v; want negative and 0", late, sched)
	}
}
