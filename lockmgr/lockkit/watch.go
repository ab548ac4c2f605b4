package lockkit

import (
	"context"
	"time"
)

// Watch checks a held lock at an interval, in a goroutine of its own, for a
// [lockmgr.Lease] whose lock lives as long as a session or a connection (a database
// advisory lock, say): its Lost is closed once a check fails. Embed it in
// the Lease to give it Lost, and call Stop first in Release.
type Watch struct {
	lost, stop, done chan struct{}
}

// NewWatch starts a Watch that calls check every interval, each call
// bounded by timeout, until Stop or the first error.
func NewWatch(every, timeout time.Duration, check func(context.Context) error) *Watch {
	w := &Watch{lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for err := error(nil); err == nil; {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err = check(ctx)
			cancel()
		}
		close(w.lost)
	}()
	return w
}

// Lost implements [lockmgr.Lease]: it is closed once a check failed.
func (w *Watch) Lost() <-chan struct{} { return w.lost }

// Stop ends the checks. It waits for a check in progress, so that what the
// check uses (the lease's connection) is free once it returns. Call it
// once.
func (w *Watch) Stop() {
	close(w.stop)
	<-w.done
}
