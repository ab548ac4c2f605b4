package redislock

import "time"

// WithMaxWait sets how long a waiter waits for a release message before it
// tries again regardless: the safety net. A test that sets it long proves
// that release messages wake waiters.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }
