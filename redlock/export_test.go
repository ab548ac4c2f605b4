package redlock

import (
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/lockmgr"
)

// NewLocker returns the Locker that a Manager with these arguments uses.
func NewLocker(clients []redis.UniversalClient, opts ...Option) (lockmgr.Locker, error) {
	l, _, err := newLocker(clients, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}
