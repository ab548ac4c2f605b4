package tiered

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Merging (internal/merge, as luascript does). On a plain client (one
// server, which runs a script over any keys) every call is in one group; on
// any other client the calls of one Cluster slot form a group, as
// luascript's (a group per slot would leave the calls of spread SKUs on one
// server each its own round trip: the 64 spread SKUs of make bench merge
// into batches instead). A call that finds its group idle runs move.lua at
// once, alone, and marks the group busy; the calls that arrive while it is
// in flight queue, and a drain goroutine sends them (up to maxBatch, those
// whose ctx ended left out) as one batch.lua call when it returns, and
// again until the queue is empty. A batch holds calls of several SKUs only
// on a plain or Cluster client; on any other (a Ring shards by hash tag) it
// holds one SKU's. Each call gets its own reply, as move.lua's; a call
// whose reply says grant first (the allotment short) or warm up first (no
// state) does that in its own goroutine, then queues again, so the drain
// never waits for SQL.

var (
	//go:embed holds.lua
	holdsLua string
	//go:embed move.lua
	moveFile string
	//go:embed batch.lua
	batchFile string

	// move.lua and batch.lua after the hold helpers they call.
	moveLua, batchLua       = plainHead + holdsLua + moveFile, plainHead + holdsLua + batchFile
	moveScript, batchScript = rediskeys.NewScript(moveLua), rediskeys.NewScript(batchLua)
)

// req is one Reduce or Return, as the merging queue holds it.
type req struct {
	sku, key string
	qty      int64
	dir      driver.Direction
	rec      string // with a ledger: the call's record (ledger.go)
}

// take is the units req takes from the allotment: negative for a Return.
func (c req) take() int64 {
	if c.dir == driver.DirReturn {
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

// newQueue returns the merging queue of m: a group per Cluster slot, of
// which a plain client uses one (groupOf).
func (m *Manager) newQueue() *merge.Queue[req, reply] {
	cross := false
	switch m.rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
		cross = true
	}
	join := func(first, next req) bool { return cross || next.sku == first.sku }
	return merge.New(rediskeys.Slots, m.cfg.maxBatch, join, m.one, m.run)
}

// send sends c to Redis, merged with the calls of its group or alone. Its
// error is the ctx's, for a call whose ctx ended while it was queued or
// its batch in flight (see merge.Queue.Do).
func (m *Manager) send(ctx context.Context, c req) (reply, error) {
	if m.queue == nil {
		return m.one(ctx, c), nil
	}
	return m.queue.Do(ctx, m.groupOf(c.sku), c)
}

// groupOf returns the merging group of sku's calls: its Cluster slot, or
// 0 on a plain client, whose one server runs a script over any keys.
func (m *Manager) groupOf(sku string) int {
	if _, one := m.rdb.(*redis.Client); one {
		return 0
	}
	return rediskeys.Slot(sku)
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
	if m.cfg.ledgerOn {
		if c.key == "" {
			args = append(args, "")
		}
		args = append(args, c.rec)
	}
	cmd, acked, err := m.sc.move.Run(ctx, m.rdb, m.cfg.replicas, m.cfg.replicaTO, keys, args...)
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
	b := m.encode(batch)
	defer batchBufs.Put(b)
	cmd, acked, err := m.sc.batch.Run(ctx, m.rdb, m.cfg.replicas, m.cfg.replicaTO, b.keys, b.args...)
	m.result(ctx, err)
	if err != nil {
		err = withCtx(ctx, err)
	} else {
		err = b.decode(batch, cmd.Val(), acked)
	}
	if err != nil {
		for _, c := range batch {
			c.Ans = reply{err: fmt.Errorf("merged with %d other calls: %w", len(batch)-1, err)}
		}
	}
}

// batchBuf is the arguments of one batch.lua call and what its reply needs
// to be read, kept for the next batch (batchBufs).
type batchBuf struct {
	keys  []string
	args  []any
	skus  []string // the batch's SKUs, in order of their first call
	sku   []int    // per call of the batch, its SKU's index in skus
	order []int    // the calls (their index in the batch) grouped by SKU: batch.lua's positions
	ex    []int    // per position, the index in the reply of its exception, or -1
	ends  []int    // per SKU, the end of its calls in order
}

var batchBufs = sync.Pool{New: func() any { return new(batchBuf) }}

// encode returns the batch.lua arguments of batch: its calls grouped by SKU,
// in arrival order within each, consecutive unkeyed calls that take the
// same units as one run (see batch.lua).
func (m *Manager) encode(batch calls) *batchBuf {
	b := batchBufs.Get().(*batchBuf)
	b.group(batch)
	b.keys = b.keys[:0]
	b.args = append(b.args[:0], m.cfg.lowWater, m.cfg.refillTO.Milliseconds(), m.cfg.keyTTL.Milliseconds())
	if m.cfg.ledgerOn {
		b.args = append(b.args, 0) // where the records begin, set below
	}
	from := 0
	for s, sku := range b.skus {
		b.keys = append(b.keys, m.stateKey(sku), m.journalKey(sku))
		m.encodeSKU(b, batch, b.order[from:b.ends[s]])
		from = b.ends[s]
	}
	if m.cfg.ledgerOn { // the calls' records, by position
		b.args[3] = len(b.args)
		for _, i := range b.order {
			b.args = append(b.args, batch[i].Req.rec)
		}
	}
	return b
}

// group sets b's skus, sku, order and ends for batch.
func (b *batchBuf) group(batch calls) {
	b.skus, b.sku = b.skus[:0], b.sku[:0]
	for _, q := range batch {
		i := slices.Index(b.skus, q.Req.sku)
		if i < 0 {
			i = len(b.skus)
			b.skus = append(b.skus, q.Req.sku)
		}
		b.sku = append(b.sku, i)
	}
	b.order, b.ends = b.order[:0], b.ends[:0]
	if len(b.skus) == 1 {
		for i := range batch {
			b.order = append(b.order, i)
		}
		b.ends = append(b.ends, len(batch))
		return
	}
	for s := range b.skus {
		for i, t := range b.sku {
			if t == s {
				b.order = append(b.order, i)
			}
		}
		b.ends = append(b.ends, len(b.order))
	}
}

// encodeSKU appends to b the items of one SKU's calls, order (their
// indexes in batch), and the keys of their records.
func (m *Manager) encodeSKU(b *batchBuf, batch calls, order []int) {
	items := len(b.args)
	b.args = append(b.args, 0)
	run, runQ := int64(0), int64(0) // the run of unkeyed calls being counted
	for _, i := range order {
		c := &batch[i].Req
		q := c.take()
		switch {
		case c.key != "":
			if run > 0 {
				b.args = append(b.args, run, runQ)
				run = 0
			}
			b.keys = append(b.keys, rediskeys.Key(m.cfg.prefix, c.sku, c.dir, c.key))
			b.args = append(b.args, 0, q)
		case run > 0 && q == runQ:
			run++
		default:
			if run > 0 {
				b.args = append(b.args, run, runQ)
			}
			run, runQ = 1, q
		}
	}
	if run > 0 {
		b.args = append(b.args, run, runQ)
	}
	b.args[items] = (len(b.args) - items - 1) / 2
}

// decode gives each call of batch its reply from r, batch.lua's reply to
// b's arguments.
func (b *batchBuf) decode(batch calls, v any, acked int64) error {
	r, err := ints(v)
	if err != nil {
		return err
	}
	n := len(b.skus)
	if len(r) < n || (len(r)-n)%4 != 0 {
		return fmt.Errorf("batch script returned %d values for %d SKUs", len(r), n)
	}
	b.ex = slices.Grow(b.ex[:0], len(batch))[:len(batch)]
	for i := range b.ex {
		b.ex[i] = -1
	}
	for e := n; e < len(r); e += 4 {
		pos := r[e] - 1
		if pos < 0 || pos >= int64(len(batch)) || b.ex[pos] >= 0 {
			return fmt.Errorf("batch script returned %v for %d calls", r, len(batch))
		}
		b.ex[pos] = e
	}
	from := 0
	for s := range b.skus {
		left := r[s] // the SKU's remaining stock, as its calls move
		for pos := from; pos < b.ends[s]; pos++ {
			c := batch[b.order[pos]]
			e := b.ex[pos]
			if e >= 0 && r[e+1] != codeMoved {
				c.Ans = reply{code: r[e+1], v: r[e+2], w: r[e+3], acked: acked}
				continue
			}
			left -= c.Req.take()
			c.Ans = reply{code: codeMoved, v: left, w: -1, acked: acked}
			if e >= 0 {
				if r[e+2] != left {
					return fmt.Errorf("batch script returned %v: call %d left %d, not %d", r, pos+1, r[e+2], left)
				}
				c.Ans.w = r[e+3]
			}
		}
		from = b.ends[s]
	}
	return nil
}
