package luascript

import (
	"context"
	_ "embed"
	"fmt"
	"slices"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Merging (internal/merge). The calls of one Cluster slot (on a plain
// client too: the slot of a SKU's keys is known whatever the client) form a
// group. A batch holds calls of several SKUs only on a plain or Cluster
// client (one server, or one slot on one server); on any other (a Ring
// shards by hash tag) it holds one SKU's. A call that finds its group idle
// sends itself at once, as its own script call, and marks the group busy. A
// call that finds it busy queues. When the call in flight returns, a drain
// goroutine sends what queued meanwhile (up to maxBatch calls, skipping
// those whose ctx ended) as one batch.lua call, hands each call its own
// outcome, and repeats until the queue is empty, then marks the group idle.
// So one script call per slot is in flight at a time, and no call ever
// waits for anything but the call in flight.

//go:embed batch.lua
var batchLua string

var batchScript = rediskeys.NewScript(noLedger + holdsLua + batchLua) // orders_holds.lua first

// call is one Reduce or Return, as the merging queue (internal/merge)
// holds it.
type call struct {
	sku string
	key string
	ref string // with a ledger: the call's reference
	qty int64
	dir driver.Direction
}

// answer is a call's outcome.
type answer struct {
	n   int64
	err error
}

// batch is a queued call with its answer.
type batch = []*merge.Call[call, answer]

// newQueue returns the merging queue of m: a group per Cluster slot.
func (m *Manager) newQueue() *merge.Queue[call, answer] {
	join := func(first, next call) bool { return m.crossSKU || next.sku == first.sku }
	lone := func(ctx context.Context, c call) answer {
		n, err := m.move(ctx, c.sku, c.qty, c.dir, c.key)
		return answer{n, err}
	}
	return merge.New(rediskeys.Slots, m.maxBatch, join, lone, m.run)
}

// merged runs a call, merged with the calls of its slot that queue beside
// it.
func (m *Manager) merged(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	c := call{sku: sku, key: key, qty: qty, dir: dir}
	if m.ledgerOn {
		c.ref = driver.Ref(ctx)
	}
	a, err := m.queue.Do(ctx, rediskeys.Slot(sku), c)
	if err != nil {
		return 0, err
	}
	return a.n, a.err
}

// run sends batch and gives each call its outcome.
func (m *Manager) run(calls batch) {
	if len(calls) == 1 {
		c := &calls[0].Req
		n, err := m.move(calls[0].Ctx, c.sku, c.qty, c.dir, c.key)
		calls[0].Ans = answer{n, err}
		return
	}
	ctx, cancel := merge.Context(calls)
	defer cancel()
	keys := make([]string, 0, 3*len(calls))
	args := make([]any, 1, 1+3*len(calls))
	args[0] = m.ttlMs
	var skus []string // skus[i] has its stock key at keys[stock[i]-1]
	var stock []int
	for _, q := range calls {
		c := &q.Req
		i := slices.Index(skus, c.sku)
		if i < 0 {
			i = len(skus)
			skus = append(skus, c.sku)
			keys = append(keys, rediskeys.Stock(m.prefix, c.sku))
			stock = append(stock, len(keys))
			keys = append(keys, rediskeys.HoldMarker(m.prefix, c.sku)) // orders.go
		}
		rec := 0
		if c.key != "" {
			keys = append(keys, rediskeys.Key(m.prefix, c.sku, c.dir, c.key))
			rec = len(keys)
		}
		args = append(args, stock[i], signed(c.qty, c.dir), rec)
		if m.ledgerOn {
			args = append(args, c.key, c.ref)
		}
	}
	cmd, acked, err := m.scripts.batch.Run(ctx, m.client, m.replicas, m.replicaTimeout, keys, args...)
	var res []any
	if err == nil {
		res, err = cmd.Slice()
	}
	if err == nil && len(res) != 2*len(calls) {
		err = fmt.Errorf("batch script returned %d values for %d calls", len(res), len(calls))
	}
	for i, q := range calls {
		if err != nil {
			q.Ans.err = fmt.Errorf("merged with %d other calls: %w", len(calls)-1, err)
		} else {
			q.Ans.n, q.Ans.err = m.outcome(&q.Req, res[2*i], res[2*i+1], acked)
		}
	}
}

// outcome is the result of call c that the batch script answered with code
// and value.
func (m *Manager) outcome(c *call, code, value any, acked int64) (int64, error) {
	n, ok := value.(int64)
	if !ok {
		return 0, fmt.Errorf("batch script value is %T", value)
	}
	switch code {
	case int64(0):
		return n, m.checkReplicas(acked)
	case int64(1):
		return m.refused(c.qty, c.dir, n)
	case int64(2):
		return 0, inventory.ErrNotFound
	case int64(3):
		if err := m.checkReplicas(acked); err != nil {
			return n, err
		}
		return n, fmt.Errorf("%w: key %q", inventory.ErrDuplicate, c.key)
	case int64(4):
		return 0, fmt.Errorf("stock key %s does not hold a number", rediskeys.Stock(m.prefix, c.sku))
	}
	return 0, fmt.Errorf("unknown batch script code %v", code)
}
