package tiered

import (
	"context"
	_ "embed"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Merging (internal/merge, as luascript does). The calls of one Cluster
// slot form a group. A call that finds its group idle runs move.lua at
// once, alone, and marks the group busy; the calls that arrive while it is
// in flight queue, and a drain goroutine sends them (up to maxBatch, those
// whose ctx ended left out) as one batch.lua call when it returns, and
// again until the queue is empty. A batch holds calls of several SKUs only
// on a plain or Cluster client (one server, or one slot on one server); on
// any other (a Ring shards by hash tag) it holds one SKU's. Each call gets
// its own reply, as move.lua's; a call whose reply says grant first (the
// allotment short) or warm up first (no state) does that in its own
// goroutine, then queues again, so the drain never waits for SQL.

//go:embed batch.lua
var batchLua string

var batchScript = rediskeys.NewScript(batchLua)

// req is one Reduce or Return, as the merging queue holds it.
type req struct {
	sku, key string
	qty      int64
	dir      inventory.Direction
}

// take is the units req takes from the allotment: negative for a Return.
func (c req) take() int64 {
	if c.dir == inventory.DirReturn {
		return -c.qty
	}
	return c.qty
}

// Codes of a reply (see move.lua, batch.lua).
const (
	codeMoved     = 0  // v the remaining stock; w -1, or g when the call asks for a refill
	codeRefused   = 1  // v the remaining stock
	codeShort     = 2  // v g, w the allotment: grant, then again
	codeNoState   = 3  // warm up, then again
	codeDuplicate = 4  // v the remaining stock the key's record holds
	codeNotHash   = 5  // the state key holds something else
	codeOpen      = -1 // not sent: the circuit opened meanwhile
)

// reply is the answer of Redis to one call: a code and two values, the
// replicas that acknowledged its script call (WithReplicas), or an error
// (the call's outcome unknown).
type reply struct {
	code, v, w int64
	acked      int64
	err        error
}

// calls is a batch of queued calls.
type calls = []*merge.Call[req, reply]

// newQueue returns the merging queue of m: a group per Cluster slot.
func (m *Manager) newQueue() *merge.Queue[req, reply] {
	cross := false
	switch m.rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
		cross = true
	}
	join := func(first, next req) bool { return cross || next.sku == first.sku }
	return merge.New(rediskeys.Slots, m.cfg.maxBatch, join, m.one, m.run)
}

// send sends c to Redis, merged with the calls of its slot or alone. Its
// error is the ctx's, for a call whose ctx ended while it was queued or
// its batch in flight (see merge.Queue.Do).
func (m *Manager) send(ctx context.Context, c req) (reply, error) {
	if m.queue == nil {
		return m.one(ctx, c), nil
	}
	return m.queue.Do(ctx, rediskeys.Slot(c.sku), c)
}

// one runs c alone, as one move.lua call.
func (m *Manager) one(ctx context.Context, c req) reply {
	take := c.take()
	keys := []string{m.stateKey(c.sku), m.journalKey(c.sku)}
	args := []any{take, -take, m.cfg.lowWater, m.cfg.refillTO.Milliseconds()}
	if c.key != "" {
		keys = append(keys, rediskeys.Key(m.cfg.prefix, c.sku, c.dir, c.key))
		args = append(args, m.cfg.keyTTL.Milliseconds())
	}
	cmd, acked, err := moveScript.Run(ctx, m.rdb, m.cfg.replicas, m.cfg.replicaTO, keys, args...)
	m.result(ctx, err)
	if err != nil {
		return reply{err: withCtx(ctx, err)}
	}
	r, err := ints(cmd.Val())
	if err != nil {
		return reply{err: err}
	}
	rep := reply{code: r[0], w: -1, acked: acked}
	switch {
	case r[0] == codeMoved && len(r) == 4:
		rep.v = r[1]
		if r[2] == 1 {
			rep.w = r[3]
		}
	case r[0] == codeShort && len(r) == 3:
		rep.v, rep.w = r[1], r[2]
	case r[0] == codeNoState:
	case (r[0] == codeRefused || r[0] == codeDuplicate) && len(r) == 2:
		rep.v = r[1]
	default:
		return reply{err: fmt.Errorf("script replied %v", r)}
	}
	return rep
}

// run sends a batch queued behind the call in flight and gives each call
// its reply.
func (m *Manager) run(batch calls) {
	if m.br.open() { // calls not sent may go to SQL alone
		for _, c := range batch {
			c.Ans = reply{code: codeOpen}
		}
		return
	}
	if len(batch) == 1 {
		batch[0].Ans = m.one(batch[0].Ctx, batch[0].Req)
		return
	}
	ctx, cancel := merge.Context(batch)
	defer cancel()
	keys := make([]string, 0, 3*len(batch))
	args := make([]any, 3, 3+3*len(batch))
	args[0], args[1], args[2] = m.cfg.lowWater, m.cfg.refillTO.Milliseconds(), m.cfg.keyTTL.Milliseconds()
	var skus []string // skus[i] has its state hash at keys[state[i]-1]
	var state []int
	for _, q := range batch {
		c := &q.Req
		i := slices.Index(skus, c.sku)
		if i < 0 {
			i = len(skus)
			skus = append(skus, c.sku)
			keys = append(keys, m.stateKey(c.sku), m.journalKey(c.sku))
			state = append(state, len(keys)-1)
		}
		rec := 0
		if c.key != "" {
			keys = append(keys, rediskeys.Key(m.cfg.prefix, c.sku, c.dir, c.key))
			rec = len(keys)
		}
		args = append(args, state[i], c.take(), rec)
	}
	cmd, acked, err := batchScript.Run(ctx, m.rdb, m.cfg.replicas, m.cfg.replicaTO, keys, args...)
	m.result(ctx, err)
	var r []int64
	if err != nil {
		err = withCtx(ctx, err)
	} else if r, err = ints(cmd.Val()); err == nil && len(r) != 3*len(batch) {
		err = fmt.Errorf("batch script returned %d values for %d calls", len(r), len(batch))
	}
	for i, c := range batch {
		if err != nil {
			c.Ans = reply{err: fmt.Errorf("merged with %d other calls: %w", len(batch)-1, err)}
			continue
		}
		c.Ans = reply{code: r[3*i], v: r[3*i+1], w: r[3*i+2], acked: acked}
	}
}

// checkReplicas returns an error when WithReplicas asked for more replicas
// than acknowledged a write.
func (m *Manager) checkReplicas(acked int64) error {
	if acked >= int64(m.cfg.replicas) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d within %v; the write is on the primary, whether it survives a failover is unknown (retry with the same key)",
		rediskeys.ErrReplicas, acked, m.cfg.replicas, m.cfg.replicaTO)
}
