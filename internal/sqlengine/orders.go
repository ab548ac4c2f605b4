package sqlengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/ledger"
)

// Orders runs the calls of [inventory.OrderManager], and single-SKU moves,
// over the stock table, the ledger and the holds table, for optimistic and
// rowlock (and any caller's transaction). Every call is one transaction
// (or, in a caller's transaction, one savepoint) that touches the stock
// rows of its SKUs in SKU order, so that two calls never wait for each
// other in a cycle.
//
// The rule that keeps holds exact: a line of a hold changes state only in a
// transaction that holds its SKU's stock row (locked with FOR UPDATE, or
// written by a compare-and-set), and every write to the holds table is
// conditional on the state it read (state = 'held'), its row count checked.
// A count that differs means another writer got there first: the
// transaction rolls back and the call is tried again.
//
// The zero Orders is not usable: set T.
type Orders struct {
	T *Tables
	// CAS makes ReduceLines, ReturnLines, Reserve and Move read the rows
	// (and their expired holds) first, without locks, check the lines, and
	// then write each row with one conditional UPDATE, in SKU order: the
	// stock moves (with the released units) only if it still lets the line
	// through, and the released holds must all still be held; otherwise
	// the attempt rolls back and reads again (optimistic). Without CAS they
	// lock the rows with FOR UPDATE first (rowlock).
	// Confirm, Cancel and Sweep always lock: they must see the hold's
	// lines as they are. Not for SQLite, where a transaction must write
	// before it reads (see sqlite.go), and Reserve's reads the hold id first.
	CAS bool
	// Attempts bounds how often a call whose compare-and-set or
	// conditional write lost is tried in a transaction of its own; at
	// least 1. In a caller's transaction a call is tried once.
	Attempts int
	// Base and Cap bound the decorrelated-jitter pause between attempts.
	Base, Cap time.Duration
	// LockWait, if positive, bounds a lock wait as rowlock documents it:
	// a lock statement is abandoned after twice the server's bound, and on
	// SQLite the whole transaction after LockWait.
	LockWait time.Duration
	// SweepLimit is how many holds one Sweep releases at most; at least 1.
	SweepLimit int
	// AfterLock, if set (by tests, before any call), runs once a call has
	// locked its rows, before it writes.
	AfterLock func(skus []string)
	// Stock, if set, is where the calls that lock (all but those of CAS)
	// lock, read and write each SKU's stock, in place of the stock table
	// (package segment: a SKU's segment rows). Nil is the stock table.
	Stock StockRows
}

// StockRows locks and writes the stock of a SKU for [Orders]. *Tables is
// one, over the stock table; see [Tables.LockHolds] and [Tables.Set]. The
// Version of LockHolds' Row is the StockRows' own: the calls hand it back
// to Set of the same SKU in the same transaction.
type StockRows interface {
	LockHolds(ctx context.Context, tx *sqlx.Tx, sku string) (Row, error)
	Set(ctx context.Context, e sqlx.ExecerContext, sku string, version, stock int64) (ok bool, err error)
}

// stock is where o's calls lock and write the stock: see Orders.Stock.
func (o *Orders) stock() StockRows {
	if o.Stock != nil {
		return o.Stock
	}
	return o.T
}

// Move is one move of one SKU: Reduce or Return of qty, keyed when key is
// not empty, in caller's transaction when caller is not nil. It releases
// the SKU's expired holds in the same transaction. It returns the new
// stock, or on a refusal the stock it saw.
func (o *Orders) Move(ctx context.Context, caller *sqlx.Tx, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	stock, err := o.moveLines(ctx, caller, string(dir), []inventory.Line{{SKU: sku, Qty: qty}}, dir, sku, key, "", 0,
		func(_ []inventory.Line, stock []int64, refused error) error {
			if dir == driver.DirReduce {
				return o.T.Fail("", fmt.Errorf("%w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, stock[0], qty))
			}
			return o.T.Fail("", refused)
		})
	if key != "" && (errors.Is(err, inventory.ErrDuplicate) || errors.Is(err, inventory.ErrInsufficientStock)) {
		// A call with the same key committed first (while this one waited
		// for a lock): report the duplicate it is, with its remaining.
		if first, found, serr := o.T.Seen(ctx, o.q(caller), sku, dir, key); serr == nil && found {
			return first, o.T.Duplicate(sku, dir, key)
		}
	}
	if err == nil || errors.Is(err, inventory.ErrInsufficientStock) || errors.Is(err, inventory.ErrInvalidArgument) {
		return stock[0], err
	}
	return 0, err
}

func (o *Orders) q(caller *sqlx.Tx) sqlx.QueryerContext {
	if caller != nil {
		return caller
	}
	return o.T.DB
}

// MoveLines is ReduceLines or ReturnLines, keyed when key != "", behind
// the strategy's face (the arguments are valid).
func (o *Orders) MoveLines(ctx context.Context, caller *sqlx.Tx, lines []inventory.Line, dir driver.Direction, key string) error {
	op := string(dir) + " lines"
	if key != "" {
		// Lines keys live in the ledger under the empty SKU, which no
		// single-SKU call can use.
		if _, found, err := o.T.Seen(ctx, o.q(caller), "", dir, key); err != nil || found {
			if err == nil {
				err = o.T.Duplicate("", dir, key)
			}
			return err
		}
	}
	_, err := o.moveLines(ctx, caller, op, lines, dir, "", key, "", 0, o.refusal(op))
	return err
}

// refusal is the error of a lines call whose lines did not all fit.
func (o *Orders) refusal(op string) func([]inventory.Line, []int64, error) error {
	return func(lines []inventory.Line, stock []int64, refused error) error {
		if !errors.Is(refused, inventory.ErrInsufficientStock) {
			return o.T.Fail(op, refused)
		}
		e := &inventory.InsufficientError{}
		for i, l := range lines {
			if stock[i] < l.Qty {
				e.Short = append(e.Short, inventory.Shortfall{Line: l, Available: stock[i]})
			}
		}
		return o.T.Fail(op, e)
	}
}

// Reserve is [inventory.OrderManager.Reserve] behind the strategy's face.
// A refused Reserve whose id is in use is ErrDuplicate, as Move's keyed
// refusal is: the retry of a Reserve that took the last units, its reply
// lost, must not be told that nothing was taken.
func (o *Orders) Reserve(ctx context.Context, caller *sqlx.Tx, id string, lines []inventory.Line, ttl time.Duration) error {
	_, err := o.moveLines(ctx, caller, "reserve", lines, driver.DirReduce, "", "", id, ttl, o.refusal("reserve"))
	if errors.Is(err, inventory.ErrInsufficientStock) {
		if ls, now, lerr := o.T.Lines(ctx, o.q(caller), id, false); lerr == nil && len(ls) > 0 && !gone(ls, now, o.T.KeyTTL()) {
			return o.T.Fail("", fmt.Errorf("%w: hold %q exists", inventory.ErrDuplicate, id))
		}
	}
	return err
}

// moveLines moves every line or none, in dir, releasing the expired holds
// of their SKUs; it records key in the ledger under ledgerSKU and, when
// hold is not empty, inserts the lines as hold hold for ttl. It returns the
// new stock per line or, on a refusal, refuse's error, which it makes from
// the lines, the stock seen per line and the cause (ErrInsufficientStock or
// ErrInvalidArgument), with the stock seen.
func (o *Orders) moveLines(ctx context.Context, caller *sqlx.Tx, op string, lines []inventory.Line, dir driver.Direction,
	ledgerSKU, key, hold string, ttl time.Duration, refuse func([]inventory.Line, []int64, error) error) ([]int64, error) {
	m := &linesMove{o: o, lines: lines, dir: dir, ledgerSKU: ledgerSKU, key: key, hold: hold, ttl: ttl, refuse: refuse,
		skus: make([]string, len(lines)), stock: make([]int64, len(lines)), ref: driver.Ref(ctx)}
	for i, l := range lines {
		m.skus[i] = l.SKU
	}
	slices.Sort(m.skus)
	var err error
	if o.CAS {
		var rs map[string]*row
		err = o.run(ctx, caller, op, func(ctx context.Context, q sqlx.QueryerContext) error {
			var err error
			if rs, err = o.rows(ctx, nil, q, nil, m.skus, false); err != nil {
				return err
			}
			return m.plan(rs)
		}, func(ctx context.Context, _ *shot, tx *sqlx.Tx) error { return m.apply(ctx, tx, rs) })
	} else {
		err = o.run(ctx, caller, op, nil, func(ctx context.Context, s *shot, tx *sqlx.Tx) error {
			rs, err := o.rows(ctx, s, nil, tx, m.skus, true)
			if err == nil {
				err = m.plan(rs)
			}
			if err == nil {
				err = m.apply(ctx, tx, rs)
			}
			return err
		})
	}
	if err == nil && key != "" {
		o.T.Tidy(ctx, 1)
	}
	return m.stock, err
}

// linesMove is one call of [Orders.moveLines]: its arguments, and the
// stock of each line, planned and then written.
type linesMove struct {
	o                    *Orders
	lines                []inventory.Line
	dir                  driver.Direction
	ledgerSKU, key, hold string
	ttl                  time.Duration
	refuse               func([]inventory.Line, []int64, error) error
	skus                 []string // of the lines, sorted
	stock                []int64  // per line
	ref                  string   // the caller's reference, for the movement ledger
}

// plan computes the stock of each line from rs, or returns the refusal.
func (m *linesMove) plan(rs map[string]*row) error {
	var refused error
	for i, l := range m.lines {
		r := rs[l.SKU]
		avail := r.Stock + r.units
		if m.dir == driver.DirReturn {
			if err := driver.CheckReturn(avail, l.Qty); err != nil && refused == nil {
				refused = fmt.Errorf("%q: %w", l.SKU, err)
			}
			m.stock[i] = avail + l.Qty
			continue
		}
		if avail < l.Qty {
			refused = inventory.ErrInsufficientStock
		}
		m.stock[i] = avail - l.Qty
	}
	if refused == nil {
		return nil
	}
	for i, l := range m.lines {
		m.stock[i] = rs[l.SKU].Stock // what Get shows: nothing was released
	}
	return m.refuse(m.lines, m.stock, refused)
}

// apply writes the planned stock through tx, in SKU order, with the
// ledger row and the hold's lines.
func (m *linesMove) apply(ctx context.Context, tx *sqlx.Tx, rs map[string]*row) error {
	if m.hold != "" {
		if err := m.o.claim(ctx, tx, m.hold); err != nil {
			return err
		}
	}
	var ms []Move
	for _, sku := range m.skus {
		i := slices.IndexFunc(m.lines, func(l inventory.Line) bool { return l.SKU == sku })
		if err := m.write(ctx, tx, i, rs[sku]); err != nil {
			return err
		}
		if m.o.T.Ledgered() {
			ms = m.moves(ms, i, rs[sku])
		}
	}
	if err := m.o.T.WriteMoves(ctx, tx, ms); err != nil {
		return err
	}
	if m.key != "" {
		if err := m.o.T.Record(ctx, tx, m.ledgerSKU, m.dir, m.key, remainingOf(m.ledgerSKU, m.stock)); err != nil {
			return err
		}
	}
	if m.hold == "" {
		return nil
	}
	ok, err := m.o.T.Reserve(ctx, tx, m.hold, m.lines, m.ttl)
	if err == nil && !ok {
		err = m.o.T.Fail("", fmt.Errorf("%w: hold %q exists", inventory.ErrDuplicate, m.hold))
	}
	return err
}

// moves appends to ms the entries of line i, whose row r was written:
// the expired lines it released, then the line.
func (m *linesMove) moves(ms []Move, i int, r *row) []Move {
	l := m.lines[i]
	base := m.stock[i] - r.units + l.Qty // the row's stock before the write
	kind := KindOf(m.dir)
	if m.dir == driver.DirReturn {
		base -= 2 * l.Qty
	}
	if m.hold != "" {
		kind = ledger.Reserve
	}
	ms, _ = Expires(ms, l.SKU, r.refs, base)
	return append(ms, Move{SKU: l.SKU, Kind: kind, Units: l.Qty, Available: m.stock[i], Key: m.key, Ref: m.ref, Hold: m.hold})
}

// write writes line i, whose row is r, through tx: without CAS, the row
// read under its lock; with CAS, one conditional UPDATE that adds the
// released units and moves the line, if the stock still lets it (it waits
// for a row lock instead of losing to its holder).
func (m *linesMove) write(ctx context.Context, tx *sqlx.Tx, i int, r *row) error {
	sku, q := m.lines[i].SKU, m.lines[i].Qty
	if !m.o.CAS {
		return m.o.write(ctx, tx, sku, r, m.stock[i])
	}
	delta, lo, hi := r.units-q, max(0, q-r.units), inventory.MaxStock
	if m.dir == driver.DirReturn {
		delta, lo, hi = r.units+q, 0, inventory.MaxStock-q-r.units
	}
	rem, ok, err := m.o.T.Shift(ctx, tx, sku, delta, lo, hi)
	if err == nil && ok {
		ok, err = m.o.T.Release(ctx, tx, sku, r.refs)
	}
	if err == nil && !ok {
		err = errConflict // the stock no longer fits, or the holds were released: read again
	}
	if err == nil {
		m.stock[i] = rem
	}
	return err
}

func remainingOf(ledgerSKU string, stock []int64) int64 {
	if ledgerSKU == "" {
		return 0 // a lines call has no one remaining value
	}
	return stock[0]
}

// claim makes hold id free for a new Reserve in tx: absent, or ended more
// than the key TTL ago (its lines are deleted).
func (o *Orders) claim(ctx context.Context, tx *sqlx.Tx, id string) error {
	ls, now, err := o.T.Lines(ctx, tx, id, false)
	if err != nil || len(ls) == 0 {
		return err
	}
	if !gone(ls, now, o.T.KeyTTL()) {
		return o.T.Fail("", fmt.Errorf("%w: hold %q exists", inventory.ErrDuplicate, id))
	}
	n, err := o.T.ForgetHold(ctx, tx, id)
	if err == nil && n != int64(len(ls)) {
		err = errConflict
	}
	return err
}

// gone reports whether every line of a hold ended more than ttl before now.
func gone(ls []Line, now int64, ttl time.Duration) bool {
	for _, l := range ls {
		if !l.Ended.Valid || l.Ended.Int64 > now-ttl.Microseconds() {
			return false
		}
	}
	return true
}

// onHold runs fn on hold id's lines, read under the lock of every row of
// the hold's SKUs, in a transaction that fn's nil error commits. The
// outcome fn reports is returned after the commit.
func (o *Orders) onHold(ctx context.Context, caller *sqlx.Tx, op, id string,
	fn func(ctx context.Context, tx *sqlx.Tx, ls []Line, now int64, rs map[string]*row) (outcome error, err error)) error {
	pre, _, err := o.T.Lines(ctx, o.q(caller), id, false)
	if err != nil {
		return err
	}
	notFound := o.T.Fail(op, fmt.Errorf("%w: %q", inventory.ErrHoldNotFound, id))
	if len(pre) == 0 {
		return notFound
	}
	skus := make([]string, len(pre))
	for i, l := range pre {
		skus[i] = l.SKU // sorted by the statement
	}
	var outcome error
	err = o.run(ctx, caller, op, nil, func(ctx context.Context, s *shot, tx *sqlx.Tx) error {
		rs, err := o.rows(ctx, s, nil, tx, skus, true)
		if err != nil {
			return err
		}
		for _, r := range rs { // this hold's own lines are fn's to end
			r.refs = slices.DeleteFunc(r.refs, func(ref Ref) bool {
				if ref.ID == id {
					r.units -= ref.Qty
				}
				return ref.ID == id
			})
		}
		ls, now, err := o.T.Lines(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if len(ls) != len(skus) || slices.IndexFunc(ls, func(l Line) bool { return !slices.Contains(skus, l.SKU) }) >= 0 {
			return errConflict // the hold changed between the reads
		}
		if gone(ls, now, o.T.KeyTTL()) {
			outcome = notFound
			return nil
		}
		outcome, err = fn(ctx, tx, ls, now, rs)
		return err
	})
	if err != nil {
		return err
	}
	return outcome
}

// giveBack ends the held lines of ls as state and gives their units back.
func (o *Orders) giveBack(ctx context.Context, tx *sqlx.Tx, id string, ls []Line, rs map[string]*row, state string) (int, error) {
	held := 0
	for _, l := range ls {
		if l.State == Held {
			held++
		}
	}
	if held == 0 {
		return 0, nil
	}
	n, err := o.T.EndHold(ctx, tx, id, state)
	if err != nil {
		return 0, err
	}
	if n != int64(held) {
		return 0, errConflict
	}
	var ms []Move
	kind := ledger.Cancel
	if state == Expired {
		kind = ledger.Expire
	}
	for _, l := range ls {
		if l.State != Held {
			continue
		}
		r := rs[l.SKU]
		after := min(r.Stock+r.units+l.Qty, inventory.MaxStock)
		if err := o.write(ctx, tx, l.SKU, r, after); err != nil {
			return 0, err
		}
		if o.T.Ledgered() {
			ms, _ = Expires(ms, l.SKU, r.refs, r.Stock)
			ms = append(ms, Move{SKU: l.SKU, Kind: kind, Units: l.Qty, Available: after, Hold: id})
		}
	}
	return held, o.T.WriteMoves(ctx, tx, ms)
}

func states(ls []Line) (held, confirmed, released int) {
	for _, l := range ls {
		switch l.State {
		case Held:
			held++
		case Confirmed:
			confirmed++
		default:
			released++
		}
	}
	return
}

// Confirm implements [inventory.OrderManager.Confirm]. A hold found expired
// is released in the same transaction (its units are back, as the error
// says), even though Confirm returns ErrHoldReleased.
func (o *Orders) Confirm(ctx context.Context, caller *sqlx.Tx, id string) error {
	return o.onHold(ctx, caller, "confirm", id, func(ctx context.Context, tx *sqlx.Tx, ls []Line, now int64, rs map[string]*row) (error, error) {
		held, confirmed, _ := states(ls)
		switch {
		case confirmed == len(ls):
			return o.T.Fail("confirm", fmt.Errorf("%w: hold %q is confirmed", inventory.ErrDuplicate, id)), nil
		case held == len(ls) && ls[0].Expires > now:
			n, err := o.T.ConfirmHold(ctx, tx, id)
			if err == nil && n != int64(len(ls)) {
				err = errConflict
			}
			if err == nil && o.T.Ledgered() {
				ms := make([]Move, len(ls))
				for i, l := range ls {
					ms[i] = Move{SKU: l.SKU, Kind: ledger.Confirm, Units: l.Qty, Available: rs[l.SKU].Stock, Hold: id}
				}
				err = o.T.WriteMoves(ctx, tx, ms)
			}
			return nil, err
		}
		_, err := o.giveBack(ctx, tx, id, ls, rs, Expired)
		return o.T.Fail("confirm", fmt.Errorf("%w: hold %q", inventory.ErrHoldReleased, id)), err
	})
}

// Cancel implements [inventory.OrderManager.Cancel].
func (o *Orders) Cancel(ctx context.Context, caller *sqlx.Tx, id string) error {
	return o.onHold(ctx, caller, "cancel", id, func(ctx context.Context, tx *sqlx.Tx, ls []Line, now int64, rs map[string]*row) (error, error) {
		if _, confirmed, _ := states(ls); confirmed > 0 {
			return o.T.Fail("cancel", fmt.Errorf("%w: hold %q", inventory.ErrHoldConfirmed, id)), nil
		}
		state := Cancelled
		if ls[0].Expires <= now {
			state = Expired
		}
		_, err := o.giveBack(ctx, tx, id, ls, rs, state)
		return nil, err
	})
}

// Held is [inventory.OrderManager.Held] behind the strategy's face.
func (o *Orders) Held(ctx context.Context, caller *sqlx.Tx, sku string) (int64, error) {
	return o.T.Held(ctx, o.q(caller), sku)
}

// Sweep implements [inventory.OrderManager.Sweep]: it releases up to
// SweepLimit holds past their TTL, each in a transaction of its own (or
// all in the caller's), and prunes a batch of lines that ended more than
// the key TTL ago. A hold whose rows stay locked past the lock wait
// (ErrContention) is left for the next Sweep, or for the call that holds
// them, which releases the hold's lines of its own SKUs.
func (o *Orders) Sweep(ctx context.Context, caller *sqlx.Tx) (int, error) {
	ids, err := o.T.Due(ctx, o.q(caller), o.SweepLimit)
	if err != nil {
		return 0, err
	}
	released := 0
	for _, id := range ids {
		var n int
		err := o.onHold(ctx, caller, "sweep", id, func(ctx context.Context, tx *sqlx.Tx, ls []Line, now int64, rs map[string]*row) (error, error) {
			n = 0
			if ls[0].Expires > now {
				return nil, nil
			}
			held, err := o.giveBack(ctx, tx, id, ls, rs, Expired)
			if held > 0 {
				n = 1
			}
			return nil, err
		})
		if errors.Is(err, inventory.ErrNotFound) {
			continue // released and forgotten meanwhile
		}
		if errors.Is(err, inventory.ErrContention) && ctx.Err() == nil && caller == nil {
			// Its rows stayed locked: the call holding them releases the
			// hold's lines of its SKUs itself; the next Sweep gets the rest.
			continue
		}
		if err != nil {
			return released, err
		}
		released += n
	}
	if caller == nil {
		_, _ = o.T.PruneHolds(ctx) // ended lines already count as absent
	}
	return released, nil
}
