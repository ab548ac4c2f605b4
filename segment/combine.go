package segment

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"

	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
)

// maxBatch is the most unkeyed Reduces of one SKU a Manager combines.
const maxBatch = 128

// got is the answer of one combined Reduce.
type got struct {
	rem int64
	err error
}

// combined takes qty units of sku with the other unkeyed Reduces of the
// SKU that this Manager has in flight: see sendBatch.
func (m *Manager) combined(ctx context.Context, sku string, qty int64) (int64, error) {
	a, err := m.comb.Do(ctx, sku, qty)
	if err != nil {
		return 0, err
	}
	return a.rem, a.err
}

// sendBatch takes the units of a batch of unkeyed Reduces of sku, in
// arrival order, from one segment in one conditional UPDATE of their sum:
// the first call's remaining is the sum read after the write plus the
// units of the calls after it, and so on, as if they had run one by one.
// When the segment cannot fit the batch, the batch takes the SKU path at
// once (see wholeBatch).
func (m *Manager) sendBatch(ctx context.Context, sku string, _ *struct{}, batch []*merge.Call[int64, got]) {
	var total int64
	for _, c := range batch {
		total += c.Req
	}
	s, ok := m.pick(sku)
	err := errMiss
	var rem int64
	if ok {
		rem, err = m.grab(ctx, sku, s, total)
		if errors.Is(err, errMiss) {
			m.hints.mark(sku, s)
		}
	}
	switch {
	case err == nil:
		for i := len(batch) - 1; i >= 0; i-- {
			batch[i].Ans = got{rem: rem}
			rem += batch[i].Req
		}
	case errors.Is(err, errMiss):
		m.wholeBatch(ctx, sku, batch)
	default:
		for _, c := range batch {
			c.Ans = got{err: err}
		}
	}
}

// wholeBatch is the SKU path of a batch: a snapshot read of the SKU's sum
// refuses every call when it fits none of them, with no lock; otherwise
// the order engine's batch ([sqlengine.Orders.MoveBatch]), one transaction
// that locks every segment row of sku, releases its lines held past their
// TTL, serves the calls in order while the sum fits them (a call it cannot
// fit is refused with the sum as it stands), and writes the new stock back
// spread evenly.
func (m *Manager) wholeBatch(ctx context.Context, sku string, batch []*merge.Call[int64, got]) {
	least := batch[0].Req
	for _, c := range batch {
		least = min(least, c.Req)
	}
	if rem, err := m.peek(ctx, sku, least, ""); err != nil {
		for _, c := range batch {
			c.Ans = got{rem, err}
		}
		if errors.Is(err, inventory.ErrInsufficientStock) {
			for _, c := range batch { // every call's own refusal
				c.Ans.err = m.t.Check(sku, driver.DirReduce, rem, c.Req)
			}
		}
		return
	}
	steps := make([]sqlengine.Step, len(batch))
	for i, c := range batch {
		steps[i] = sqlengine.Step{Qty: c.Req, Dir: driver.DirReduce}
	}
	out, err := m.o.MoveBatch(ctx, sku, steps)
	for i, c := range batch {
		if err != nil {
			c.Ans = got{err: err}
			continue
		}
		c.Ans = got{out[i].Remaining, out[i].Err}
	}
}

// grab takes qty units from segment s of sku in one autocommit statement
// (no idempotency key to write with it), and returns the SKU's sum after
// it: on PostgreSQL from the same statement (the other segments as of its
// snapshot), elsewhere read by a second statement (a snapshot after the
// write), or, should that read fail, the segment's own stock after the
// write. errMiss means the segment could not fit it; nothing changed.
func (m *Manager) grab(ctx context.Context, sku string, s int, qty int64) (int64, error) {
	var rem int64
	switch m.t.Engine {
	case sqldialect.MySQL:
		m.prepare(ctx)
		var res sql.Result
		var err error
		if m.st.grab != nil {
			res, err = m.st.grab.ExecContext(ctx, qty, sku, s, qty)
		} else {
			res, err = m.t.DB.ExecContext(ctx, m.q.grab, qty, sku, s, qty)
		}
		if err != nil {
			return 0, m.t.Err(ctx, "reduce", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, m.t.Err(ctx, "reduce", err)
		}
		if n == 0 {
			return 0, errMiss
		}
		if rem, err = res.LastInsertId(); err != nil {
			return 0, m.t.Err(ctx, "reduce", err)
		}
	case sqldialect.Postgres:
		err := m.t.DB.QueryRowContext(ctx, m.q.grab, qty, sku, s, qty, sku, s).Scan(&rem)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, errMiss
		}
		if err != nil {
			return 0, m.t.Err(ctx, "reduce", err)
		}
		return rem, nil
	default:
		err := m.t.DB.QueryRowContext(ctx, m.q.grab, qty, sku, s, qty).Scan(&rem)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, errMiss
		}
		if err != nil {
			return 0, m.t.Err(ctx, "reduce", err)
		}
	}
	var sum, n int64
	if err := m.t.DB.QueryRowContext(ctx, m.q.total, sku).Scan(&sum, &n); err == nil {
		rem = sum
	}
	return rem, nil
}

// stmts are the hot statements, prepared once per pool on MySQL, whose
// driver otherwise prepares, runs and closes a statement with arguments
// each time (see sqlengine's prepared.go); nil elsewhere, or when the
// prepare failed: the text runs instead.
type stmts struct {
	once              sync.Once
	take, total, grab *sql.Stmt
}

// prepare prepares the hot statements on MySQL, once; call it holding no
// connection of the pool.
func (m *Manager) prepare(ctx context.Context) {
	if m.t.Engine != sqldialect.MySQL {
		return
	}
	m.st.once.Do(func() {
		take, err := m.t.DB.PrepareContext(context.WithoutCancel(ctx), m.q.take)
		if err != nil {
			return
		}
		total, err := m.t.DB.PrepareContext(context.WithoutCancel(ctx), m.q.total)
		if err != nil {
			_ = take.Close()
			return
		}
		grab, err := m.t.DB.PrepareContext(context.WithoutCancel(ctx), m.q.grab)
		if err != nil {
			_, _ = take.Close(), total.Close()
			return
		}
		m.st.take, m.st.total, m.st.grab = take, total, grab
	})
}

// exec runs stmt, prepared as p if it is, in tx.
func exec(ctx context.Context, tx *sqlx.Tx, p *sql.Stmt, stmt string, args ...any) (sql.Result, error) {
	if p != nil {
		return tx.StmtContext(ctx, p).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, stmt, args...)
}

// queryRow runs stmt, prepared as p if it is, in tx.
func queryRow(ctx context.Context, tx *sqlx.Tx, p *sql.Stmt, stmt string, args ...any) *sql.Row {
	if p != nil {
		return tx.StmtContext(ctx, p).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, stmt, args...)
}

// close closes the prepared statements, if any.
func (st *stmts) close() {
	for _, s := range []*sql.Stmt{st.take, st.total, st.grab} {
		if s != nil {
			_ = s.Close()
		}
	}
}
