package redislock

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/lockmgr"
)

// NewLocker returns the Locker a Manager made with opts would use.
func NewLocker(client redis.UniversalClient, opts ...Option) (lockmgr.Locker, error) {
	l, _, err := newLocker(client, opts)
	return l, err
}

// WithMaxWait sets how long a waiter waits for a release message before it
// tries again regardless: the safety net. A test that sets it long proves
// that release messages wake waiters.
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }
