package sqldialect

import "context"

// Bound runs fn, which must use ctx for its round trips, and returns its
// results; if ctx ends first it returns at once with an error wrapping
// ctx.Err() from operation op, and fn finishes in the background, its
// results dropped.
//
// Drivers do not all return when ctx ends while the server hangs: pgx sends
// a cancel request and closes the connection only a second later (its
// CancelRequestContextWatcherHandler's DeadlineDelay), lib/pq waits for the
// server to answer the cancel. Bound keeps the call within its deadline
// whatever the driver does. What fn was doing stays atomic: a transaction
// the driver abandons is rolled back by the server when its connection
// closes, and one whose COMMIT was already sent commits or not as a whole,
// which is an outcome a call that ends with its context may always have.
// fn must not share variables with the caller: it may still be running when
// Bound returns.
func Bound[T any](ctx context.Context, t *Tables, op string, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, t.Err(ctx, op, err)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-ch: // both ready: the outcome is known, keep it
			return r.v, r.err
		default:
		}
		return zero, t.Err(ctx, op, ctx.Err())
	}
}
