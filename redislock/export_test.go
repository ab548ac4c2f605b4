package redislock

import "time"

// WithMaxWait sets how long a waiter waits for a hand-over before it
// tries again regardless: the safety net. A test that sets it long proves
// that hand-overs wake waiters.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// QueueKey is queueKey, for tests that look at the waiters' queue.
var QueueKey = queueKey
