package ratelimit

import (
	"time"

	"github.com/stockkit/inventory"
)

// SetClock makes m, a Wrap result, read the time from now.
func SetClock(m inventory.StockManager, now func() time.Time) { limiterOf(m).now = now }

// Buckets is how many per-SKU buckets m, a Wrap result, keeps.
func Buckets(m inventory.StockManager) int {
	l := limiterOf(m)
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

func limiterOf(m inventory.StockManager) *limiter {
	if o, ok := m.(orders); ok {
		return o.limiter
	}
	return m.(*limiter)
}
