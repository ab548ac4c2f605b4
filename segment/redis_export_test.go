package segment

import (
	"context"
	"time"

	"github.com/stockkit/inventory/driver"
)

// SetRedisHook sets the hook that runs after each step of a Redis
// transfer (see hook) and returns a function that restores the previous
// one. Set it while no call is in flight.
func SetRedisHook(f func(step string) error) (restore func()) {
	old := hook
	hook = f
	return func() { hook = old }
}

// SegKey is the key of segment i of sku.
func (m *Redis) SegKey(sku string, i int) string { return m.segKey(sku, i) }

// SetOrderTimes shortens how long an order attempt may take (LinesTTL)
// and how long Sweep waits after a Confirm or Cancel (EndGrace).
func (m *Redis) SetOrderTimes(attempt, grace time.Duration) { m.times = orderTimes{attempt, grace} }

// LateLine runs line i, of qty units of sku, of the attempt whose line key
// is key, as that attempt's take of it would (held for hold ms): the take
// of a line that arrives after the attempt ended.
func (m *Redis) LateLine(ctx context.Context, key, sku string, qty, hold int64) (int64, error) {
	return m.move(ctx, redisCall{sku: sku, s: m.home(key), q: qty, key: key, dir: driver.DirReduce, hold: hold})
}
