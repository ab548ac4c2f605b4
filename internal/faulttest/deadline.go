package faulttest

import (
	"context"
	"sync"
	"testing"
	"time"

	inventory "github.com/stockkit/inventory"
)

// Late runs call with a context whose deadline is d from now and reports how
// long after that deadline call returned (zero or negative when it returned in
// time), beside how late a bare timer set for the same deadline fired. The
// timer's lateness is what the Go scheduler alone cost on this machine at that
// moment; the difference is the library's own lateness.
func Late(d time.Duration, call func(ctx context.Context) error) (late, timerLate time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-time.After(time.Until(deadline))
		timerLate = time.Since(deadline)
	}()
	err = call(ctx)
	late = time.Since(deadline)
	wg.Wait()
	return late, timerLate, err
}

// CheckLate runs call as Late does and fails t when it returned more than
// inventory.DeadlineSlack past its deadline, beyond the scheduler's own
// lateness measured beside it. It returns call's error, and the lateness
// attributable to the library for the test's report.
func CheckLate(t testing.TB, what string, d time.Duration, call func(ctx context.Context) error) (time.Duration, error) {
	t.Helper()
	late, timerLate, err := Late(d, call)
	own := late - max(timerLate, 0)
	if own > inventory.DeadlineSlack {
		t.Errorf("%s: returned %v after its %v deadline (a bare timer was %v late); the contract allows %v",
			what, late.Round(time.Millisecond), d, timerLate.Round(time.Millisecond), inventory.DeadlineSlack)
	}
	return own, err
}
