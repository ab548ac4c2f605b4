package segment

import (
	"context"
	"fmt"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Merging (internal/merge, as luascript's): the calls of one segment
// form a group. A call that finds its segment's group idle sends
// itself at once; the calls that arrive while it is in flight queue, and
// go together as one redis_take.lua call (after one read of the other
// segments) when it returns, each with its own outcome, in order; a
// keyed call's record is checked and written in that script, for it
// alone.

// maxMerge bounds a merged batch.
const maxMerge = 256

// redisCall is a call as the merging queue holds it: its SKU, home
// segment, signed quantity, and key ("" for none) with its direction; for
// a line of an order, how long it is held in ms (above 0) or its record
// kept (below 0, negated: redis_orders.go).
type redisCall struct {
	sku  string
	s    int
	q    int64
	key  string
	dir  driver.Direction
	hold int64
}

// redisAnswer is a call's {code, value} from redis_take.lua, or the
// error of its script call.
type redisAnswer struct {
	code, val int64
	err       error
}

// newQueue returns the merging queue of m: a group per Cluster slot, in
// which a batch holds the calls of one segment.
func (m *Redis) newQueue() *merge.Queue[redisCall, redisAnswer] {
	join := func(first, next redisCall) bool { return next.sku == first.sku && next.s == first.s }
	return merge.New(rediskeys.Slots, maxMerge, join, m.lone, m.sendBatch)
}

// merged runs call c on its home segment, merged with the calls of the
// segment that queue beside it.
func (m *Redis) merged(ctx context.Context, c redisCall) (code, val int64, err error) {
	a, err := m.queue.Do(ctx, rediskeys.SegmentSlot(c.sku, c.s, m.n), c)
	if err != nil {
		return 0, 0, err
	}
	return a.code, a.val, a.err
}

// lone runs one call alone.
func (m *Redis) lone(ctx context.Context, c redisCall) redisAnswer {
	res, err := m.run(ctx, []redisCall{c}, nil)
	if err != nil {
		return redisAnswer{err: err}
	}
	return res[0]
}

// sendBatch sends calls, all of one segment, as one script call and gives
// each its outcome.
func (m *Redis) sendBatch(calls []*merge.Call[redisCall, redisAnswer]) {
	if len(calls) == 1 {
		calls[0].Ans = m.lone(calls[0].Ctx, calls[0].Req)
		return
	}
	ctx, cancel := merge.Context(calls)
	defer cancel()
	cs := make([]redisCall, len(calls))
	for i, c := range calls {
		cs[i] = c.Req
	}
	res, err := m.run(ctx, cs, nil)
	for i, c := range calls {
		if err != nil {
			c.Ans.err = fmt.Errorf("merged with %d other calls: %w", len(calls)-1, err)
		} else {
			c.Ans = res[i]
		}
	}
}
