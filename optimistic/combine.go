package optimistic

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqldialect"
)

// req is one Reduce or Return; ans is its answer, which the batch that
// took it sets. The calls of a SKU are merged by Manager.comb: each batch
// is applied by a goroutine of its own, not by one of the callers, so that
// every caller can leave at its deadline while the others' statements are
// still running (see merge.Keyed).
type (
	req struct {
		qty int64
		dir inventory.Direction
		key string
	}
	ans struct {
		rem int64
		err error
	}
	call = merge.Call[req, ans]
)

// combine queues the call and waits until it is applied or ctx is done.
// A call that leaves with its ctx after its batch was taken may yet take
// effect, as any call that ends with its context may have; a keyed retry
// tells.
func (m *Manager) combine(ctx context.Context, sku string, r req) (int64, error) {
	a, err := m.comb.Do(ctx, sku, r)
	if err != nil {
		return 0, m.t.Err(ctx, string(r.dir), err)
	}
	return a.rem, a.err
}

// apply runs batch to completion: the conditional UPDATE of its total
// where that can answer every call (see [Manager.direct]); otherwise read,
// compute every call's result in order, compare-and-set, retrying on
// conflict. A caller may have left by then; its result is dropped. ctx is
// cancelled once every caller of the batch gave up. short is the SKU's:
// the last read of the SKU refused a call for want of stock, so the next
// batch reads first rather than try the conditional UPDATE, which would
// miss; it lives while the SKU has calls (merge.Keyed's state).
func (m *Manager) apply(ctx context.Context, sku string, short *bool, batch []*call) {
	pause := m.cfg.base
	for attempt := 1; ; attempt++ {
		// A caller whose ctx ended before this attempt leaves unwritten (a
		// copy: Keyed answers every call of its batch).
		batch = slices.DeleteFunc(slices.Clone(batch), func(c *call) bool {
			if err := c.Ctx.Err(); err != nil {
				c.Ans = ans{0, m.t.Err(c.Ctx, string(c.Req.dir), err)}
				return true
			}
			return false
		})
		if len(batch) == 0 {
			return
		}
		conflict, err := m.attempt(ctx, sku, short, batch)
		if err == nil && conflict && attempt >= m.cfg.attempts {
			err = fmt.Errorf("optimistic: %q: %w after %d compare-and-set attempts", sku, inventory.ErrContention, attempt)
		}
		if err != nil || !conflict {
			for _, c := range batch {
				if err != nil {
					c.Ans = ans{0, err}
					if cerr := c.Ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
						c.Ans.err = fmt.Errorf("%w: %w", err, cerr)
					}
				}
			}
			return
		}
		*short = false // the retry tries the conditional UPDATE first
		pause = m.backoff(pause)
		sleep(ctx, pause)
	}
}

// errConflict rolls back a transaction whose compare-and-set lost.
var errConflict = errors.New("optimistic: conflict")

// attempt applies batch with the conditional UPDATE of its total if it
// can ([Manager.direct]); if not, it reads the row (and the keys of the
// batch), computes each call's result into it, and writes the outcome with
// one compare-and-set. conflict=true: another writer got there first;
// nothing was written.
func (m *Manager) attempt(ctx context.Context, sku string, short *bool, batch []*call) (conflict bool, err error) {
	if !*short && !m.casOnly {
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
	steps := make([]sqldialect.Step, len(batch))
	for i, c := range batch {
		steps[i] = sqldialect.Step{Qty: c.Req.qty, Dir: c.Req.dir, Key: c.Req.key}
	}
	var entries []sqldialect.Entry
	if keys := sqldialect.Keys(steps); len(keys) > 0 {
		// Read after the row: if a write lands in between, the CAS fails.
		if entries, err = m.t.Entries(ctx, m.t.DB, sku, keys); err != nil {
			return false, err
		}
	}
	out, cur, records, wrote, sh := m.t.Apply(sku, stock, entries, steps)
	*short = sh
	for i, c := range batch {
		c.Ans = ans{out[i].Remaining, out[i].Err}
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
	dir := batch[0].Req.dir
	var total int64
	keyed := false
	for i, c := range batch {
		if c.Req.dir != dir {
			return false, nil
		}
		total += c.Req.qty // at most 128 calls of MaxStock each: no overflow
		if c.Req.key != "" {
			keyed = true
			for _, d := range batch[:i] {
				if d.Req.key == c.Req.key {
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
			c.Ans.rem = cur
			if dir == inventory.DirReduce {
				cur += c.Req.qty
			} else {
				cur -= c.Req.qty
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
				if c.Req.key != "" {
					records = append(records, sqldialect.Entry{Dir: dir, Key: c.Req.key, Remaining: c.Ans.rem})
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
		c.Ans.err = nil
	}
	return true, nil
}
