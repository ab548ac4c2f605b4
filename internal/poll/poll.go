// Package poll is the loop behind [inventory.Reap] and the ledger's
// Feed.Run: call a function every period until a context ends.
package poll

import (
	"context"
	"time"
)

// Every calls f every period until ctx is done, and then returns ctx's
// error; with now, it calls f once at once, before the first period. f
// runs with ctx. onErr, if not nil, receives each error f returns while
// ctx is live (the loop carries on). A call that outlasts the period
// delays the next one rather than queueing calls. Every starts no
// goroutine.
func Every(ctx context.Context, period time.Duration, now bool, f func(context.Context) error, onErr func(error)) error {
	call := func() {
		if err := f(ctx); err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
	if now && ctx.Err() == nil {
		call()
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			call()
		}
	}
}
