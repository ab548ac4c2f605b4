package optimistic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect"
)

// call is one Reduce or Return waiting for its SKU's queue. The drain that
// takes it writes rem and err, then closes done.
type call struct {
	ctx  context.Context
	qty  int64
	dir  inventory.Direction
	key  string
	done chan struct{}
	rem  int64
	err  error

	taken bool // by a drain; guarded by queue.mu
}

// queue holds the calls of one SKU, which one drain goroutine at a time
// applies.
type queue struct {
	mu      sync.Mutex
	pending []*call
	running bool // a drain goroutine is applying this queue
	refs    int  // calls and the drain using this queue; guarded by Manager.mu

	// short: the last read of this SKU refused a call for want of stock,
	// so the next batch reads first rather than try the conditional
	// UPDATE, which would miss. Only the drain goroutine uses it.
	short bool
}

// combine queues c and waits until it is applied or ctx is done. The
// calls are applied by a goroutine of their own, not by one of the
// callers, so that every caller can leave at its deadline while the others'
// statements are still running.
func (m *Manager) combine(ctx context.Context, sku string, c *call) (int64, error) {
	q := m.queue(sku)
	defer m.unqueue(sku, q)
	q.mu.Lock()
	q.pending = append(q.pending, c)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		m.mu.Lock()
		q.refs++ // the drain's; q stays in m.hot until it ends
		m.mu.Unlock()
		go m.drain(sku, q)
	}

	select {
	case <-c.done:
		return c.rem, c.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	taken := c.taken
	if !taken {
		q.pending = slices.DeleteFunc(q.pending, func(x *call) bool { return x == c })
	}
	q.mu.Unlock()
	if taken {
		select {
		case <-c.done: // the outcome is known after all
			return c.rem, c.err
		default:
		}
		// Its batch is being written: it may yet take effect, as any call
		// that ends with its context may have; a keyed retry tells.
	}
	return 0, m.t.Err(ctx, string(c.dir), ctx.Err())
}

// drain applies q's calls, batch after batch, until none is pending.
func (m *Manager) drain(sku string, q *queue) {
	defer m.unqueue(sku, q)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		n := min(len(q.pending), m.cfg.maxBatch)
		batch := slices.Clone(q.pending[:n])
		q.pending = slices.Delete(q.pending, 0, n)
		for _, c := range batch {
			c.taken = true
		}
		q.mu.Unlock()
		m.apply(sku, q, batch)
	}
}

func (m *Manager) queue(sku string) *queue {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.hot[sku]
	if q == nil {
		q = &queue{}
		m.hot[sku] = q
	}
	q.refs++
	return q
}

func (m *Manager) unqueue(sku string, q *queue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q.refs--; q.refs == 0 {
		delete(m.hot, sku)
	}
}

// apply runs batch to completion: the conditional UPDATE of its total
// where that can answer every call (see [Manager.direct]); otherwise read,
// compute every call's result in order, compare-and-set, retrying on
// conflict. Then it closes every done. A caller may have left by then; its
// result is dropped.
func (m *Manager) apply(sku string, q *queue, batch []*call) {
	// The batch's statements stop only once every caller in it gave up.
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	var live atomic.Int32
	live.Store(int32(len(batch)))
	for _, c := range batch {
		stop := context.AfterFunc(c.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}

	pause := m.cfg.base
	for attempt := 1; ; attempt++ {
		// A caller whose ctx ended before this attempt leaves unwritten.
		batch = slices.DeleteFunc(batch, func(c *call) bool {
			if err := c.ctx.Err(); err != nil {
				c.rem, c.err = 0, m.t.Err(c.ctx, string(c.dir), err)
				close(c.done)
				return true
			}
			return false
		})
		if len(batch) == 0 {
			return
		}
		conflict, err := m.attempt(ctx, sku, q, batch)
		if err == nil && conflict && attempt >= m.cfg.attempts {
			err = fmt.Errorf("optimistic: %q: %w after %d compare-and-set attempts", sku, inventory.ErrContention, attempt)
		}
		if err != nil || !conflict {
			for _, c := range batch {
				if err != nil {
					c.rem, c.err = 0, err
					if cerr := c.ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
						c.err = fmt.Errorf("%w: %w", err, cerr)
					}
				}
				close(c.done)
			}
			return
		}
		q.short = false // the retry tries the conditional UPDATE first
		pause = m.backoff(pause)
		sleep(ctx, pause)
	}
}

type ledgerKey struct {
	dir inventory.Direction
	key string
}

// errConflict rolls back a transaction whose compare-and-set lost.
var errConflict = errors.New("optimistic: conflict")

// attempt applies batch with the conditional UPDATE of its total if it
// can ([Manager.direct]); if not, it reads the row (and the keys of the
// batch), computes each call's result into it, and writes the outcome with
// one compare-and-set. conflict=true: another writer got there first;
// nothing was written.
func (m *Manager) attempt(ctx context.Context, sku string, q *queue, batch []*call) (conflict bool, err error) {
	if !q.short && !m.casOnly {
		if done, err := m.direct(ctx, sku, batch); done || err != nil {
			return false, err
		}
	}
	rs, err := m.t.ReadHolds(ctx, m.t.DB, []string{sku})
	if err != nil {
		return false, err
	}
	r, ok := rs[sku]
	if !ok {
		return false, m.t.NotFound(sku)
	}
	stock, version := r.Stock, r.Version
	var expired []sqldialect.Ref // lines past their TTL, released with the write
	if r.Expired {
		var units int64
		if expired, units, err = m.t.Expired(ctx, m.t.DB, sku); err != nil {
			return false, err
		}
		stock += units
	}
	seen := map[ledgerKey]sqldialect.Entry{}
	var keys []string
	for _, c := range batch {
		if c.key != "" && !slices.Contains(keys, c.key) {
			keys = append(keys, c.key)
		}
	}
	if len(keys) > 0 {
		// Read after the row: if a write lands in between, the CAS fails.
		es, err := m.t.Entries(ctx, m.t.DB, sku, keys)
		if err != nil {
			return false, err
		}
		for _, e := range es {
			seen[ledgerKey{e.Dir, e.Key}] = e
		}
	}

	cur, wrote := stock, false
	var records []sqldialect.Entry
	q.short = false
	for _, c := range batch {
		k := ledgerKey{c.dir, c.key}
		if e, ok := seen[k]; c.key != "" && ok && !e.Expired {
			c.rem, c.err = e.Remaining, m.t.Duplicate(sku, c.dir, c.key)
			continue
		}
		if err := m.t.Check(sku, c.dir, cur, c.qty); err != nil {
			c.rem, c.err = cur, err
			q.short = q.short || errors.Is(err, inventory.ErrInsufficientStock)
			continue
		}
		if c.dir == inventory.DirReduce {
			cur -= c.qty
		} else {
			cur += c.qty
		}
		c.rem, c.err, wrote = cur, nil, true
		if c.key != "" {
			// Later calls with this key in the batch are its duplicates.
			expired := seen[k].Expired // an expired row to replace
			seen[k] = sqldialect.Entry{Dir: c.dir, Key: c.key, Remaining: cur}
			records = append(records, sqldialect.Entry{Dir: c.dir, Key: c.key, Remaining: cur, Expired: expired})
		}
	}
	if !wrote {
		return false, nil
	}
	if m.beforeCAS != nil {
		m.beforeCAS(sku)
	}
	m.writes.Add(1)
	if len(records) == 0 && len(expired) == 0 {
		ok, err := m.t.Set(ctx, m.t.DB, sku, version, cur)
		if err == nil && !ok {
			m.conflicts.Add(1)
		}
		return !ok, err
	}
	err = m.t.Tx(ctx, func(tx *sqlx.Tx) error {
		ok, err := m.t.Set(ctx, tx, sku, version, cur)
		if err == nil && ok {
			ok, err = m.t.Release(ctx, tx, sku, expired)
		}
		if err == nil && ok && len(records) > 0 {
			ok, err = m.t.RecordAll(ctx, tx, sku, records)
		}
		if err == nil && !ok {
			err = errConflict
		}
		return err
	})
	if errors.Is(err, errConflict) {
		m.conflicts.Add(1)
		return true, nil
	}
	if err == nil {
		m.t.Tidy(ctx, len(records))
	}
	return false, err
}

// direct applies batch with one conditional UPDATE of its total (see
// [sqldialect.Tables.Move]) when that answers every call: the calls are all
// in one direction, no key repeats in the batch, the total is at most
// MaxStock. Keyed calls' ledger rows go in the same transaction, which
// rolls back if any key is in the ledger already. The UPDATE reads no
// version, so writers of other processes do not make it fail: the row lock
// makes them take turns. Each call's remaining is counted back from the
// stock the UPDATE returns, the calls in batch order.
//
// done=false with a nil error: nothing was written (the total does not
// fit, the SKU is unknown or has expired holds to release first, a key was
// seen, or the batch is not one for this path); the caller's read and
// compare-and-set split the batch exactly.
func (m *Manager) direct(ctx context.Context, sku string, batch []*call) (done bool, err error) {
	dir := batch[0].dir
	var total int64
	keyed := false
	for i, c := range batch {
		if c.dir != dir {
			return false, nil
		}
		total += c.qty // at most 128 calls of MaxStock each: no overflow
		if c.key != "" {
			keyed = true
			for _, d := range batch[:i] {
				if d.key == c.key {
					return false, nil // a duplicate within the batch
				}
			}
		}
	}
	if total > inventory.MaxStock {
		return false, nil
	}
	if m.beforeCAS != nil {
		m.beforeCAS(sku)
	}
	delta, lo, hi := bounds(dir, total)
	// remaining fills in each call's remaining, counted back from after,
	// the stock after the whole batch.
	remaining := func(after int64) {
		cur := after
		for i := len(batch) - 1; i >= 0; i-- {
			c := batch[i]
			c.rem = cur
			if dir == inventory.DirReduce {
				cur += c.qty
			} else {
				cur -= c.qty
			}
		}
	}
	var rem int64
	var ok bool
	if !keyed {
		if rem, ok, err = m.t.Move(ctx, m.t.DB, sku, delta, lo, hi); err != nil || !ok {
			return false, err
		}
		remaining(rem)
	} else {
		var records []sqldialect.Entry
		err = m.t.Tx(ctx, func(tx *sqlx.Tx) error {
			if rem, ok, err = m.t.Move(ctx, tx, sku, delta, lo, hi); err != nil || !ok {
				return err
			}
			remaining(rem)
			records = records[:0]
			for _, c := range batch {
				if c.key != "" {
					records = append(records, sqldialect.Entry{Dir: dir, Key: c.key, Remaining: c.rem})
				}
			}
			written, err := m.t.RecordAll(ctx, tx, sku, records)
			if err == nil && !written {
				err = errConflict // a key in the ledger: the read path tells which
			}
			return err
		})
		if errors.Is(err, errConflict) {
			return false, nil
		}
		if err != nil || !ok {
			return false, err
		}
		m.t.Tidy(ctx, len(records))
	}
	for _, c := range batch {
		c.err = nil
	}
	return true, nil
}
