package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/lateness"
)

// Late is [lateness.Late]: it runs call with a context whose deadline is d
// from now and reports how late call returned, beside the scheduler's own
// delay over the same span.
func Late(d time.Duration, call func(ctx context.Context) error) (late, sched time.Duration, err error) {
	return lateness.Late(d, call)
}

// CheckLate is [lateness.CheckLate]: it fails t when call returned more
// than inventory.DeadlineSlack past its deadline, beyond the scheduler's
// own delay, and returns call's error and the library's own lateness.
func CheckLate(t testing.TB, what string, d time.Duration, call func(ctx context.Context) error) (time.Duration, error) {
	t.Helper()
	return lateness.CheckLate(t, what, d, call)
}
