package segment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqlengine"
)

// errMiss says that a segment could not fit a Reduce: it rolls the
// segment's transaction back, and the Reduce goes on elsewhere.
var errMiss = errors.New("segment: the segment cannot fit the reduce")

// fastTries is how many segments a Reduce tries before the SKU path.
const fastTries = 2

// reduce takes qty units of sku: combined with the Manager's other
// unkeyed Reduces of sku (combine.go), or alone.
func (m *Manager) reduce(ctx context.Context, sku string, qty int64, key string) (int64, error) {
	if key == "" {
		return m.combined(ctx, sku, qty)
	}
	return m.alone(ctx, sku, qty, key)
}

// alone takes qty units of sku from one segment, or else through the SKU
// path (see [Manager.whole]).
func (m *Manager) alone(ctx context.Context, sku string, qty int64, key string) (int64, error) {
	for range fastTries {
		s, ok := m.pick(sku)
		if !ok {
			break
		}
		rem, err := m.take(ctx, sku, s, qty, key)
		if !errors.Is(err, errMiss) {
			return rem, err
		}
		m.hints.mark(sku, s)
	}
	return m.whole(ctx, sku, qty, driver.DirReduce, key)
}

// pick returns the next segment of the rotation that sku was not last
// seen to have empty; ok=false when it was seen to have them all empty.
func (m *Manager) pick(sku string) (seg int, ok bool) {
	empty := m.hints.get(sku)
	start := int(m.next.Add(1) % uint64(m.n))
	for i := range m.n {
		if s := (start + i) % m.n; empty&(1<<s) == 0 {
			return s, true
		}
	}
	return 0, false
}

// take takes qty units from segment s of sku, in one transaction with the
// key if any, and returns the SKU's sum as the transaction reads it after
// its write. errMiss means the segment could not fit it (or does not
// exist); nothing changed.
func (m *Manager) take(ctx context.Context, sku string, s int, qty int64, key string) (int64, error) {
	var rem int64
	m.prepare(ctx)
	err := m.t.Tx(ctx, func(tx *sqlx.Tx) error {
		res, err := exec(ctx, tx, m.st.take, m.q.take, qty, sku, s, qty)
		if err != nil {
			return m.t.Err(ctx, "reduce", err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return m.t.Err(ctx, "reduce", err)
			}
			return errMiss
		}
		var segs int64
		if err := queryRow(ctx, tx, m.st.total, m.q.total, sku).Scan(&rem, &segs); err != nil {
			return m.t.Err(ctx, "reduce", err)
		}
		return m.record(ctx, tx, sku, driver.DirReduce, key, rem)
	})
	if errors.Is(err, inventory.ErrDuplicate) {
		return m.duplicate(ctx, sku, driver.DirReduce, key, err)
	}
	return rem, err
}

// record writes key, if any, into the ledger through tx.
func (m *Manager) record(ctx context.Context, tx *sqlx.Tx, sku string, dir driver.Direction, key string, rem int64) error {
	if key == "" {
		return nil
	}
	return m.t.Record(ctx, tx, sku, dir, key, rem)
}

// duplicate returns the remaining value recorded for key, which a
// transaction just found taken (dup, its error, is returned with it).
func (m *Manager) duplicate(ctx context.Context, sku string, dir driver.Direction, key string, dup error) (int64, error) {
	rem, _, err := m.t.Seen(ctx, m.t.DB, sku, dir, key)
	if err != nil {
		return 0, err
	}
	return rem, dup
}

// whole is the SKU path of a move: for a Reduce, a snapshot read of the
// SKU's sum and key first, which refuses without a lock; then the order
// engine's move of one SKU ([sqlengine.Orders.Move]), one transaction that
// locks every segment row of sku in segment order (segRows), releases its
// lines held past their TTL, decides on the sum, and writes the new stock
// back spread evenly over the segments, with the key.
func (m *Manager) whole(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if dir == driver.DirReduce {
		if rem, err := m.peek(ctx, sku, qty, key); err != nil {
			return rem, err
		}
	}
	return m.o.Move(ctx, nil, sku, qty, dir, key)
}

// peek refuses a Reduce that the SKU's sum, with the units of its lines
// held past their TTL (which the SKU path releases first), read in one
// snapshot, cannot fit, or whose key was recorded; nil means go on and
// lock. A refusal's remaining is the sum alone: what Get shows.
func (m *Manager) peek(ctx context.Context, sku string, qty int64, key string) (int64, error) {
	var sum, n, expired int64
	var seen sql.NullInt64
	err := m.t.DB.QueryRowxContext(ctx, m.q.peek, sku, string(driver.DirReduce), key, time.Now().UnixMilli(), sku, sku).
		Scan(&sum, &n, &seen, &expired)
	switch {
	case err != nil:
		return 0, m.t.Err(ctx, "read", err)
	case n == 0:
		return 0, m.t.NotFound(sku)
	case seen.Valid:
		return seen.Int64, m.t.Duplicate(sku, driver.DirReduce, key)
	}
	if sum+expired < qty {
		return sum, m.t.Check(sku, driver.DirReduce, sum, qty)
	}
	return sum, nil
}

// segRows is the Manager as the order engine's [sqlengine.StockRows]: a
// SKU's stock is the sum of its segment rows.
type segRows Manager

// LockHolds locks and reads every segment row of sku, in segment order,
// until tx ends: its Row's Stock is their sum, its Version the segment
// numbers the SKU has, a bit each, which Set writes back.
func (r *segRows) LockHolds(ctx context.Context, tx *sqlx.Tx, sku string) (sqlengine.Row, error) {
	last := len(r.q.lock) - 1
	for _, stmt := range r.q.lock[:last] {
		if _, err := tx.ExecContext(ctx, stmt, sku); err != nil {
			return sqlengine.Row{}, r.t.Err(ctx, "lock", err)
		}
	}
	rows, err := tx.QueryxContext(ctx, r.q.lock[last], sku)
	if err != nil {
		return sqlengine.Row{}, r.t.Err(ctx, "lock", err)
	}
	defer rows.Close()
	var out sqlengine.Row
	var mask uint64
	for rows.Next() {
		var s int
		var n int64
		var expired bool
		if err := rows.Scan(&s, &n, &expired); err != nil {
			return sqlengine.Row{}, r.t.Err(ctx, "lock", err)
		}
		if s < 0 || s >= MaxSegments {
			return sqlengine.Row{}, r.t.Fail("lock", fmt.Errorf("%q has segment %d, outside 0..%d", sku, s, MaxSegments-1))
		}
		mask |= 1 << s
		out.Stock += n
		out.Expired = out.Expired || expired
	}
	if err := rows.Err(); err != nil {
		return sqlengine.Row{}, r.t.Err(ctx, "lock", err)
	}
	if mask == 0 {
		return sqlengine.Row{}, r.t.NotFound(sku)
	}
	out.Version = int64(mask)
	return out, nil
}

// Set writes stock spread evenly over the segments version names (see
// LockHolds), which tx locked; ok is always true.
func (r *segRows) Set(ctx context.Context, e sqlx.ExecerContext, sku string, version, stock int64) (bool, error) {
	var segs []int
	for s := range MaxSegments {
		if uint64(version)&(1<<s) != 0 {
			segs = append(segs, s)
		}
	}
	return true, (*Manager)(r).write(ctx, e, sku, segs, stock)
}

// write sets the segments segs of sku to total spread evenly, through e,
// and notes which of them it left empty.
func (m *Manager) write(ctx context.Context, e sqlx.ExecerContext, sku string, segs []int, total int64) error {
	args := make([]any, 0, 3*len(segs))
	base, extra := total/int64(len(segs)), total%int64(len(segs))
	var empty uint64
	for i, s := range segs {
		n := base
		if int64(i) < extra {
			n++
		}
		if n == 0 {
			empty |= 1 << s
		}
		args = append(args, sku, s, n)
	}
	if _, err := e.ExecContext(ctx, m.q.upsertOf(m.t.Engine, len(segs)), args...); err != nil {
		return m.t.Err(ctx, "write", err)
	}
	m.hints.set(sku, empty)
	return nil
}

// hints remembers, per SKU, the segments a Manager last saw empty, so that
// its Reduces skip them: a bounded table of hashed SKUs, in which a SKU
// that hashes to another's entry takes it over. A hint only orders the
// segments a Reduce tries; the SKU path decides on the rows themselves,
// so a wrong hint costs a round trip, never a wrong answer.
type hints struct {
	seed  maphash.Seed // set by New
	table [4096]atomic.Uint64
}

func (h *hints) slot(sku string) *atomic.Uint64 {
	return &h.table[maphash.String(h.seed, sku)%uint64(len(h.table))]
}

func (h *hints) get(sku string) uint64        { return h.slot(sku).Load() }
func (h *hints) set(sku string, empty uint64) { h.slot(sku).Store(empty) }
func (h *hints) mark(sku string, s int)       { h.slot(sku).Or(1 << s) }
