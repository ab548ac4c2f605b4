package luascript

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Merging. The calls of one Cluster slot (on a plain client too: the slot
// of a SKU's keys is known whatever the client) form a group. A batch holds
// calls of several SKUs only on a plain or Cluster client (one server, or
// one slot on one server); on any other (a Ring shards by hash tag) it
// holds one SKU's. A call that
// finds its group idle sends itself at once, as its own script call, and
// marks the group busy. A call that finds it busy queues. When the call in
// flight returns, a drain goroutine sends what queued meanwhile (up to
// maxBatch calls, skipping those whose ctx ended) as one batch.lua call,
// hands each call its own outcome, and repeats until the queue is empty,
// then marks the group idle. So one script call per slot is in flight at a
// time, and no call ever waits for anything but the call in flight.

//go:embed batch.lua
var batchLua string

var batchScript = rediskeys.NewScript(holdsLua + batchLua) // orders_holds.lua first

// group is the queue of one Cluster slot.
type group struct {
	mu    sync.Mutex
	busy  bool    // a script call of the slot is in flight
	queue []*call // calls waiting for it, in arrival order
}

// call is one queued Reduce or Return. Its fields are set before it
// queues; n and err before done closes.
type call struct {
	ctx  context.Context
	sku  string
	key  string
	qty  int64
	dir  inventory.Direction
	sent bool // taken into a batch; guarded by the group's mu
	done chan struct{}
	n    int64
	err  error
}

// group returns the group of sku's slot.
func (m *Manager) group(sku string) *group {
	p := &m.groups[rediskeys.Slot(sku)]
	if g := p.Load(); g != nil {
		return g
	}
	p.CompareAndSwap(nil, new(group))
	return p.Load()
}

// merged runs a call, merged with the calls of its slot that queue beside
// it.
func (m *Manager) merged(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error) {
	g := m.group(sku)
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		n, err := m.move(ctx, sku, qty, dir, key)
		m.next(g)
		return n, err
	}
	c := &call{ctx: ctx, sku: sku, key: key, qty: qty, dir: dir, done: make(chan struct{})}
	g.queue = append(g.queue, c)
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.n, c.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	sent := c.sent
	if !sent {
		if i := slices.Index(g.queue, c); i >= 0 {
			g.queue = slices.Delete(g.queue, i, i+1)
		}
	}
	g.mu.Unlock()
	if !sent {
		return 0, ctx.Err() // never sent: nothing taken
	}
	select {
	case <-c.done:
		return c.n, c.err
	default:
	}
	return 0, fmt.Errorf("%w: sent to Redis merged with other calls, outcome unknown (retry with the same key)", ctx.Err())
}

// next starts a drain of g when calls queued, or marks g idle.
func (m *Manager) next(g *group) {
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.busy = false
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go m.drain(g)
}

// drain sends the queue of g in batches until it is empty.
func (m *Manager) drain(g *group) {
	var batch []*call
	for {
		batch = batch[:0]
		g.mu.Lock()
		keep := g.queue[:0]
		for _, c := range g.queue {
			switch {
			case c.ctx.Err() != nil: // leaves unsent
			case len(batch) < m.maxBatch && (m.crossSKU || len(batch) == 0 || c.sku == batch[0].sku):
				c.sent = true
				batch = append(batch, c)
			default:
				keep = append(keep, c)
			}
		}
		clear(g.queue[len(keep):])
		g.queue = keep
		if len(batch) == 0 {
			g.busy = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		m.run(batch)
		clear(batch)
	}
}

// run sends batch and gives each call its outcome.
func (m *Manager) run(batch []*call) {
	if len(batch) == 1 {
		c := batch[0]
		c.n, c.err = m.move(c.ctx, c.sku, c.qty, c.dir, c.key)
		close(c.done)
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	keys := make([]string, 0, 3*len(batch))
	args := make([]any, 1, 1+3*len(batch))
	args[0] = m.ttlMs
	var skus []string // skus[i] has its stock key at keys[stock[i]-1]
	var stock []int
	for _, c := range batch {
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
	}
	cmd, acked, err := batchScript.Run(ctx, m.client, m.replicas, m.replicaTimeout, keys, args...)
	var res []any
	if err == nil {
		res, err = cmd.Slice()
	}
	if err == nil && len(res) != 2*len(batch) {
		err = fmt.Errorf("batch script returned %d values for %d calls", len(res), len(batch))
	}
	for i, c := range batch {
		if err != nil {
			c.err = fmt.Errorf("merged with %d other calls: %w", len(batch)-1, err)
		} else {
			c.n, c.err = m.outcome(c, res[2*i], res[2*i+1], acked)
		}
		close(c.done)
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

// batchContext returns the context a batch runs with: the values of its
// first call's, with no cancellation, and the latest deadline of its calls
// (none when one of them has none). A caller whose own ctx ends first
// returns at once without waiting for the batch.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}
