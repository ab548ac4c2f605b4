package optimistic

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqlengine"
)

// req is one Reduce or Return; ans is its answer, which the batch that
// took it sets. The calls of a SKU are merged by Manager.comb: each batch
// is applied by a goroutine of its own, not by one of the callers, so that
// every caller can leave at its deadline while the others' statements are
// still running (see merge.Keyed).
type (
	req struct {
		qty int64
		dir driver.Direction
		key string
		ref string // the caller's reference, for the movement ledger
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

// apply runs batch to completion: the conditional UPDATE of its net
// change where every call fits (see [Manager.direct]); otherwise read,
// plan every call's outcome in order and write it conditionally, retrying
// when the write lost (see [Manager.attempt]). A caller may have left by then; its result is dropped. ctx is
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
		// The last attempt of several reads under the row lock: it
		// cannot lose.
		conflict, err := m.attempt(ctx, sku, short, batch, attempt > 1 && attempt == m.cfg.attempts)
		if err == nil && conflict && attempt >= m.cfg.attempts {
			err = m.t.Fail("", fmt.Errorf("%q: %w after %d attempts", sku, inventory.ErrContention, attempt))
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
		pause = m.o.Pause(pause)
		sleep(ctx, pause)
	}
}

type ledgerKey struct {
	dir driver.Direction
	key string
}

// errConflict rolls back a transaction whose write lost.
var errConflict = errors.New("optimistic: conflict")

// How a call of a batch ends (step.kind).
const (
	took    = iota // applied
	refused        // refused for want of stock or room (ErrInsufficientStock, MaxStock)
	dupCall        // its key was taken by an earlier call of the batch: ErrDuplicate
	dupRow         // its key is in the ledger: ErrDuplicate with the remaining recorded
)

// step is one call's part of a plan.
type step struct {
	kind int
	// off is the call's remaining less the stock before the batch; for
	// dupRow, the remaining recorded in the ledger.
	off     int64
	expired bool // took, keyed: its key's ledger row has expired and is replaced
}

// plan is how a batch applies to s, the SKU's stock before it: every
// call's outcome, each remaining relative to s, and the range lo..hi of s
// in which each of those outcomes holds. A write of the batch's net change,
// conditional on the stock being in that range, applies the batch exactly
// as planned whatever the stock is then: other writers may have moved it
// (and the version) in between, as long as every call's outcome stays.
type plan struct {
	steps  []step
	lo, hi int64
	net    int64 // the batch's change to the stock
	keyed  int   // calls that took with a key: ledger rows to write
	short  bool  // a call was refused for want of stock
}

func newPlan(n int) plan {
	return plan{steps: make([]step, n), hi: inventory.MaxStock}
}

// take plans call i, c, as applied after the calls before it.
func (p *plan) take(i int, c *call, expired bool) {
	q := c.Req.qty
	if c.Req.dir == driver.DirReduce {
		p.lo = max(p.lo, q-p.net) // s + net >= q
		p.net -= q
	} else {
		p.hi = min(p.hi, inventory.MaxStock-q-p.net) // s + net + q <= MaxStock
		p.net += q
	}
	p.steps[i] = step{kind: took, off: p.net, expired: expired}
	if c.Req.key != "" {
		p.keyed++
	}
}

// refuse plans call i, c, as refused after the calls before it.
func (p *plan) refuse(i int, c *call) {
	q := c.Req.qty
	if c.Req.dir == driver.DirReduce {
		p.hi = min(p.hi, q-p.net-1) // s + net < q
		p.short = true
	} else {
		p.lo = max(p.lo, inventory.MaxStock-q-p.net+1) // s + net + q > MaxStock
	}
	p.steps[i] = step{kind: refused, off: p.net}
}

// fits returns the plan of batch in which every call takes effect; ok is
// false when no stock lets them all (or a key repeats in the batch, which
// the read path tells apart).
func fits(batch []*call) (p plan, ok bool) {
	p = newPlan(len(batch))
	for i, c := range batch {
		if c.Req.key != "" {
			for _, d := range batch[:i] {
				if d.Req.key == c.Req.key {
					return p, false
				}
			}
		}
		p.take(i, c, false) // at most 128 calls of MaxStock each: no overflow
	}
	return p, p.lo <= p.hi
}

// split returns the plan of batch on stock s, the SKU's stock as read, with
// seen the ledger rows of the batch's keys: each call is checked in order,
// as if alone, after the calls before it.
func split(s int64, batch []*call, seen map[ledgerKey]sqlengine.Entry) plan {
	p := newPlan(len(batch))
	taken := map[ledgerKey]int{} // keyed calls of the batch that took, by key
	for i, c := range batch {
		k := ledgerKey{c.Req.dir, c.Req.key}
		if c.Req.key != "" {
			if j, ok := taken[k]; ok {
				p.steps[i] = step{kind: dupCall, off: p.steps[j].off}
				continue
			}
			if e, ok := seen[k]; ok && !e.Expired {
				p.steps[i] = step{kind: dupRow, off: e.Remaining}
				continue
			}
		}
		if !fitsOne(c.Req.dir, s+p.net, c.Req.qty) {
			p.refuse(i, c)
			continue
		}
		p.take(i, c, seen[k].Expired)
		if c.Req.key != "" {
			taken[k] = i
		}
	}
	return p
}

// fitsOne reports whether qty units can move in dir on stock cur, as
// [sqlengine.Tables.Check] does.
func fitsOne(dir driver.Direction, cur, qty int64) bool {
	if dir == driver.DirReduce {
		return cur >= qty
	}
	return driver.CheckReturn(cur, qty) == nil
}

// answer sets each call's answer from the plan, s being the stock before
// the batch.
func (p *plan) answer(m *Manager, sku string, batch []*call, s int64) {
	for i, c := range batch {
		st := p.steps[i]
		switch st.kind {
		case took:
			c.Ans = ans{s + st.off, nil}
		case refused:
			c.Ans = ans{s + st.off, m.t.Check(sku, c.Req.dir, s+st.off, c.Req.qty)}
		case dupCall:
			c.Ans = ans{s + st.off, m.t.Duplicate(sku, c.Req.dir, c.Req.key)}
		case dupRow:
			c.Ans = ans{st.off, m.t.Duplicate(sku, c.Req.dir, c.Req.key)}
		}
	}
}

// records returns the ledger rows of the keyed calls that took, s being the
// stock before the batch.
func (p *plan) records(batch []*call, s int64) []sqlengine.Entry {
	rs := make([]sqlengine.Entry, 0, p.keyed)
	for i, c := range batch {
		if st := p.steps[i]; st.kind == took && c.Req.key != "" {
			rs = append(rs, sqlengine.Entry{Dir: c.Req.dir, Key: c.Req.key, Remaining: s + st.off, Expired: st.expired})
		}
	}
	return rs
}

// moves returns the movement ledger's entries of the batch as planned:
// the expired lines released (rd.expired, the row's stock before them
// being base), then the calls that took, s being the stock before the
// batch.
func (p *plan) moves(sku string, batch []*call, expired []sqlengine.Ref, base, s int64) []sqlengine.Move {
	ms, _ := sqlengine.Expires(make([]sqlengine.Move, 0, len(expired)+len(batch)), sku, expired, base)
	for i, c := range batch {
		if st := p.steps[i]; st.kind == took {
			ms = append(ms, sqlengine.Move{SKU: sku, Kind: sqlengine.KindOf(c.Req.dir), Units: c.Req.qty,
				Available: s + st.off, Key: c.Req.key, Ref: c.Req.ref})
		}
	}
	return ms
}

// attempt applies batch with one conditional UPDATE of its net change if
// every call fits ([Manager.direct]); if not, it reads the row (and the
// keys of the batch), plans each call's outcome on it, and writes the
// outcome with one UPDATE conditional on the stock still being in the
// range where every outcome holds (in a transaction with the expired holds
// it releases and the ledger rows). conflict=true: another writer moved
// the stock out of that range first; nothing was written. With locked, the
// batch is read and written in one transaction that locks the row first,
// so that no other writer can move it in between: that attempt cannot
// lose.
func (m *Manager) attempt(ctx context.Context, sku string, short *bool, batch []*call, locked bool) (conflict bool, err error) {
	if !*short && !m.casOnly && !locked {
		if done, err := m.direct(ctx, sku, batch); done || err != nil {
			return false, err
		}
	}
	if locked {
		keyed := 0
		err = m.t.Tx(ctx, func(tx *sqlx.Tx) error {
			ok, err := m.readWrite(ctx, tx, tx, sku, short, batch)
			if err == nil && !ok {
				err = errConflict
			}
			keyed = countKeyed(batch)
			return err
		})
		if err == nil && keyed > 0 {
			m.t.Tidy(ctx, keyed) // after the commit: on SQLite the transaction held the write lock
		}
	} else {
		var ok bool
		ok, err = m.readWrite(ctx, m.t.DB, nil, sku, short, batch)
		if err == nil && !ok {
			err = errConflict
		}
	}
	if errors.Is(err, errConflict) {
		m.conflicts.Add(1)
		return true, nil
	}
	return false, err
}

// readWrite reads the row of sku, its expired holds and the ledger rows of
// the batch's keys through q ([Manager.read]), plans the batch on them
// ([split]) and writes the plan ([Manager.write]). ok=false: the write
// found the stock outside the plan's range, or a key recorded meanwhile;
// nothing was written. On success every call's answer is set.
func (m *Manager) readWrite(ctx context.Context, q sqlx.QueryerContext, tx *sqlx.Tx, sku string, short *bool, batch []*call) (ok bool, err error) {
	rd, err := m.read(ctx, q, tx, sku, batch)
	if err != nil {
		return false, err
	}
	p := split(rd.stock, batch, rd.seen)
	*short = p.short
	if !slices.ContainsFunc(p.steps, func(st step) bool { return st.kind == took }) {
		p.answer(m, sku, batch, rd.stock) // nothing to write: as read
		return true, nil
	}
	if m.beforeCAS != nil {
		m.beforeCAS(sku)
	}
	m.writes.Add(1)
	after, ok, err := m.write(ctx, tx, sku, batch, &p, rd)
	if err != nil || !ok {
		return false, err
	}
	if tx == nil && p.keyed > 0 {
		if p.keyed > 0 {
			m.t.Tidy(ctx, p.keyed)
		}
	}
	p.answer(m, sku, batch, after-p.net)
	return true, nil
}

// readout is what [Manager.read] found of a SKU.
type readout struct {
	stock   int64                         // the row's, with the units of the expired holds
	expired []sqlengine.Ref               // lines past their TTL, released with the write
	units   int64                         // of expired
	seen    map[ledgerKey]sqlengine.Entry // the ledger rows of the batch's keys
}

// read reads the row of sku through q, or locks it through tx if tx is
// not nil, then its expired holds and the ledger rows of the batch's keys.
func (m *Manager) read(ctx context.Context, q sqlx.QueryerContext, tx *sqlx.Tx, sku string, batch []*call) (rd readout, err error) {
	var r sqlengine.Row
	if tx != nil {
		r, err = m.t.LockHolds(ctx, tx, sku)
	} else {
		var rs map[string]sqlengine.Row
		if rs, err = m.t.ReadHolds(ctx, q, []string{sku}); err == nil {
			var found bool
			if r, found = rs[sku]; !found {
				err = m.t.NotFound(sku)
			}
		}
	}
	if err == nil && r.Expired {
		rd.expired, rd.units, err = m.t.Expired(ctx, q, sku)
	}
	if err != nil {
		return rd, err
	}
	rd.stock = r.Stock + rd.units
	rd.seen = map[ledgerKey]sqlengine.Entry{}
	var keys []string
	for _, c := range batch {
		if c.Req.key != "" && !slices.Contains(keys, c.Req.key) {
			keys = append(keys, c.Req.key)
		}
	}
	if len(keys) == 0 {
		return rd, nil
	}
	// Read after the row: a key recorded in between makes the write of its
	// ledger row fail, and the batch read again.
	es, err := m.t.Entries(ctx, q, sku, keys)
	for _, e := range es {
		rd.seen[ledgerKey{e.Dir, e.Key}] = e
	}
	return rd, err
}

// write writes plan p of batch, read as rd: through tx if it is not nil (a
// transaction whose first statement locked the row), otherwise as one
// UPDATE, or a transaction of its own when there are holds to release or
// keys to record. It returns the stock after the write; ok=false: nothing
// was written.
func (m *Manager) write(ctx context.Context, tx *sqlx.Tx, sku string, batch []*call, p *plan, rd readout) (after int64, ok bool, err error) {
	// The bounds and change of the row's own stock, which the released
	// units join.
	write := func(e sqlx.ExtContext) (err error) {
		after, ok, err = m.writeOn(ctx, e, sku, batch, p, rd)
		return err
	}
	switch {
	case tx != nil:
		err = write(tx)
	case p.keyed == 0 && len(rd.expired) == 0 && !m.cfg.ledger:
		err = write(m.t.DB)
	default:
		err = m.t.Tx(ctx, func(tx *sqlx.Tx) error {
			err := write(tx)
			if err == nil && !ok {
				err = errConflict
			}
			return err
		})
		if errors.Is(err, errConflict) {
			return 0, false, nil
		}
	}
	return after, ok, err
}

// writeOn is the statements of [Manager.write] through e: the
// conditional UPDATE, the release of the expired holds, the ledger rows
// of the keys and the movement ledger's entries.
func (m *Manager) writeOn(ctx context.Context, e sqlx.ExtContext, sku string, batch []*call, p *plan, rd readout) (after int64, ok bool, err error) {
	// The bounds and change of the row's own stock, which the released
	// units join.
	lo, hi, delta := max(p.lo-rd.units, 0), p.hi-rd.units, p.net+rd.units
	after, ok, err = m.t.Shift(ctx, e, sku, delta, lo, hi)
	if err == nil && ok {
		ok, err = m.t.Release(ctx, e, sku, rd.expired)
	}
	if err == nil && ok && p.keyed > 0 {
		ok, err = m.t.RecordAll(ctx, e, sku, p.records(batch, after-p.net))
	}
	if err == nil && ok && m.cfg.ledger {
		err = m.t.WriteMoves(ctx, e, p.moves(sku, batch, rd.expired, after-p.net-rd.units, after-p.net))
	}
	return after, ok, err
}

// countKeyed returns how many calls of batch took effect with a key, once
// answered.
func countKeyed(batch []*call) int {
	n := 0
	for _, c := range batch {
		if c.Req.key != "" && c.Ans.err == nil {
			n++
		}
	}
	return n
}

// direct applies batch with one conditional UPDATE of its net change (see
// [sqlengine.Tables.Move]) when every call fits: the UPDATE matches only
// if the stock lets each call, in batch order, take effect after the ones
// before it ([fits]), and no key repeats in the batch. Keyed calls' ledger
// rows go in the same transaction, which rolls back if any key is in the
// ledger already. The UPDATE reads no version, so writers of other
// processes do not make it fail: the row lock makes them take turns. Each
// call's remaining is counted from the stock the UPDATE returns.
//
// done=false with a nil error: nothing was written (the calls do not all
// fit, the SKU is unknown or has expired holds to release first, a key was
// seen); the caller's read splits the batch exactly.
func (m *Manager) direct(ctx context.Context, sku string, batch []*call) (done bool, err error) {
	p, ok := fits(batch)
	if !ok {
		return false, nil
	}
	if m.beforeCAS != nil {
		m.beforeCAS(sku)
	}
	var after int64
	switch {
	case p.keyed == 0 && !m.cfg.ledger:
		if after, ok, err = m.move1(ctx, move{sku, p.net, p.lo, p.hi}); err != nil || !ok {
			return false, err
		}
	case p.keyed == 0: // with a ledger: in one round trip where the engine can
		if after, ok, err = m.t.MoveLogged(ctx, sku, p.net, p.lo, p.hi, p.moves(sku, batch, nil, 0, 0)); err != nil || !ok {
			return false, err
		}
	default:
		if after, ok, err = m.directTx(ctx, sku, batch, &p); err != nil || !ok {
			return false, err
		}
	}
	p.answer(m, sku, batch, after-p.net)
	return true, nil
}

// directTx is the conditional UPDATE of [Manager.direct] in a transaction
// with the ledger rows of the batch's keys and the movement ledger's
// entries. ok=false: nothing was written (the UPDATE matched no row, or a
// key was in the ledger already).
func (m *Manager) directTx(ctx context.Context, sku string, batch []*call, p *plan) (after int64, ok bool, err error) {
	tx, err := m.t.Begin(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	after, ok, err = m.t.Move(ctx, tx, sku, p.net, p.lo, p.hi)
	if err == nil && ok && p.keyed > 0 {
		var written bool
		if written, err = m.t.RecordAll(ctx, tx, sku, p.records(batch, after-p.net)); err == nil && !written {
			err = errConflict // a key in the ledger: the read path tells which
		}
	}
	if err == nil && ok && m.cfg.ledger {
		err = m.t.WriteMoves(ctx, tx, p.moves(sku, batch, nil, 0, after-p.net))
	}
	if err = m.t.End(ctx, tx, err); err != nil || !ok {
		return 0, false, ignore(err, errConflict)
	}
	if p.keyed > 0 {
		m.t.Tidy(ctx, p.keyed)
	}
	return after, true, nil
}

// ignore is err, or nil when err is target.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// move is the conditional UPDATE of a batch of unkeyed calls that all fit
// ([sqlengine.Tables.Move]); moved is its outcome.
type (
	move struct {
		sku           string
		delta, lo, hi int64
	}
	moved struct {
		after int64
		ok    bool
		err   error
	}
)

// move1 runs mv through the pool: on SQLite through m.moves, which runs
// the moves of several SKUs that are ready together in one transaction.
// SQLite's writers take turns on the database's one write lock and pay one
// fsync per commit, so there one commit for several moves is that many
// fewer turns and fsyncs; a move that finds no other in flight runs at
// once, alone.
func (m *Manager) move1(ctx context.Context, mv move) (after int64, ok bool, err error) {
	if m.moves == nil {
		return m.t.Move(ctx, m.t.DB, mv.sku, mv.delta, mv.lo, mv.hi)
	}
	a, err := m.moves.Do(ctx, 0, mv)
	if err != nil {
		return 0, false, m.t.Err(ctx, "update", err)
	}
	return a.after, a.ok, a.err
}

// moveOne runs one move alone.
func (m *Manager) moveOne(ctx context.Context, mv move) moved {
	after, ok, err := m.t.Move(ctx, m.t.DB, mv.sku, mv.delta, mv.lo, mv.hi)
	return moved{after, ok, err}
}

// moveAll runs the moves of calls in one transaction, in order. A move
// that matches no row changes nothing and leaves the others be; any error
// rolls them all back, and every call gets it.
func (m *Manager) moveAll(calls []*merge.Call[move, moved]) {
	if len(calls) == 1 {
		calls[0].Ans = m.moveOne(calls[0].Ctx, calls[0].Req)
		return
	}
	ctx, cancel := merge.Context(calls)
	defer cancel()
	m.together.Add(int64(len(calls)))
	err := m.t.Tx(ctx, func(tx *sqlx.Tx) error {
		for _, c := range calls {
			mv := c.Req
			after, ok, err := m.t.Move(ctx, tx, mv.sku, mv.delta, mv.lo, mv.hi)
			if err != nil {
				return err
			}
			c.Ans = moved{after, ok, nil}
		}
		return nil
	})
	if err != nil {
		for _, c := range calls {
			c.Ans = moved{err: fmt.Errorf("moved with %d other SKUs' calls: %w", len(calls)-1, err)}
		}
	}
}
