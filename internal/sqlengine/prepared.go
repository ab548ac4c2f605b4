package sqlengine

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect"
)

// On MySQL the driver prepares a statement with arguments, executes it and
// closes it again on every call (three commands, one parse and plan each
// time) unless the DSN sets interpolateParams. For move and shift, the
// statement of every unkeyed Reduce and Return, the parse and plan of the
// holds guard's subquery cost more than the write: on a private MariaDB
// 10.11 with 64 goroutines over 64 rows (2026-12-02), move took 120 µs of
// server CPU per call, prepared once 70 µs, the bare conditional UPDATE
// run the driver's way 81 µs. So Tables prepares them once per pool, as
// [sql.Stmt], which database/sql prepares on each connection the first
// time it runs there and keeps. PostgreSQL's pgx caches its statements per
// connection itself. SQLite parses in-process, but modernc.org/sqlite keeps
// no statement cache, and parsing move took 14% of a spread run's CPU
// (2026-12-03, 64 goroutines over 64 rows): prepared once there too, the
// spread run went 1.18x and 1.23x as fast (alternating rounds).
//
// rowlock's lockHolds and set are prepared too: a prepare round trip less
// while the row is locked. Only the pool's own calls and the transactions
// that [Tables.Tx] began use them; in a caller's transaction (InTx, which
// need not be on t.DB's pool) a statement runs as text, as before. A
// failed prepare is not fatal: the call runs the statement as text, and
// the next prepare is tried after prepareRetry. A Tables that becomes unreachable closes its
// statements (runtime.AddCleanup), so that a program creating Managers for
// a while does not use up the server's max_prepared_stmt_count.

// prepareRetry is how long a statement whose prepare failed runs
// unprepared before the next try.
const prepareRetry = 10 * time.Second

// prepared is one statement of a Tables, prepared once on its pool.
type prepared struct {
	db   *sqlx.DB
	text string
	stmt atomic.Pointer[sql.Stmt] // nil until prepared

	mu    sync.Mutex // serialises the prepares
	retry time.Time  // when stmt is nil: no prepare before this
	done  bool       // closed: never prepare again
}

// get returns the prepared statement, preparing it first if need be; nil
// means run the text instead. A prepare takes a connection of the pool:
// call get only while holding none, lest the pool run dry under callers
// that hold a connection and wait for this one.
func (p *prepared) get(ctx context.Context) *sql.Stmt {
	if p == nil {
		return nil
	}
	if s := p.stmt.Load(); s != nil {
		return s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.stmt.Load(); s != nil || p.done || time.Now().Before(p.retry) {
		return s
	}
	s, err := p.db.PrepareContext(ctx, p.text)
	if err != nil {
		p.retry = time.Now().Add(prepareRetry)
		return nil
	}
	p.stmt.Store(s)
	return s
}

// peek returns the statement if it is prepared, without preparing it.
func (p *prepared) peek() *sql.Stmt {
	if p == nil {
		return nil
	}
	return p.stmt.Load()
}

// close closes the statement for good.
func (p *prepared) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.stmt.Swap(nil); s != nil {
		s.Close()
	}
	p.done = true
}

// preparedSet is the statements a Tables prepares, by text, and the
// transactions of its own in progress, which may use them.
type preparedSet struct {
	move, shift, lockHolds, set *prepared

	own sync.Map // *sqlx.Tx -> struct{}: begun by Tables.txWith, not yet ended
}

// prepare sets up t's prepared statements (MySQL and SQLite) and their
// closing when t becomes unreachable.
func (t *Tables) prepare() {
	if t.Engine == sqldialect.Postgres {
		return
	}
	set := &preparedSet{
		move:      &prepared{db: t.DB, text: t.q.Move},
		shift:     &prepared{db: t.DB, text: t.q.Shift},
		lockHolds: &prepared{db: t.DB, text: t.q.LockHolds},
		set:       &prepared{db: t.DB, text: t.q.Set},
	}
	t.prep = set
	runtime.AddCleanup(t, func(s *preparedSet) {
		for _, p := range []*prepared{s.move, s.shift, s.lockHolds, s.set} {
			p.close()
		}
	}, set)
}

// of returns the prepared form of stmt, nil if it has none.
func (s *preparedSet) of(stmt string) *prepared {
	switch {
	case s == nil:
		return nil
	case stmt == s.move.text:
		return s.move
	case stmt == s.shift.text:
		return s.shift
	case stmt == s.lockHolds.text:
		return s.lockHolds
	case stmt == s.set.text:
		return s.set
	}
	return nil
}

// warm prepares, if need be, the statements a transaction of t's may run,
// before it takes a connection for the transaction (see prepared.get).
func (t *Tables) warm(ctx context.Context) {
	if t.prep == nil {
		return
	}
	for _, p := range []*prepared{t.prep.move, t.prep.shift, t.prep.lockHolds, t.prep.set} {
		p.get(ctx)
	}
}

// ownTx marks tx as begun by t until end is called.
func (t *Tables) ownTx(tx *sqlx.Tx) (end func()) {
	if t.prep == nil {
		return func() {}
	}
	t.prep.own.Store(tx, struct{}{})
	return func() { t.prep.own.Delete(tx) }
}

// stmtFor returns the prepared form of stmt for e, or nil: for t's pool
// itself and for a transaction t began (which does not prepare: the
// transaction holds a connection, and [Tables.warm] prepared before it).
func (t *Tables) stmtFor(ctx context.Context, e any, stmt string) *sql.Stmt {
	if t.prep == nil {
		return nil
	}
	switch e := e.(type) {
	case *sqlx.DB:
		if e == t.DB {
			return t.prep.of(stmt).get(ctx)
		}
	case *sqlx.Tx:
		if _, ok := t.prep.own.Load(e); ok {
			if s := t.prep.of(stmt).peek(); s != nil {
				return e.StmtContext(ctx, s)
			}
		}
	}
	return nil
}

// execPrepared runs stmt with args through e: as its prepared statement
// when [Tables.stmtFor] gives one, otherwise as text.
func (t *Tables) execPrepared(ctx context.Context, e sqlx.ExecerContext, stmt string, args ...any) (sql.Result, error) {
	if s := t.stmtFor(ctx, e, stmt); s != nil {
		if res, err := s.ExecContext(ctx, args...); !sqldialect.TooManyStatements(err) {
			return res, err
		}
	}
	return e.ExecContext(ctx, stmt, args...)
}

// scanPrepared reads the one row of stmt with args through q into dest,
// as execPrepared runs a statement.
func (t *Tables) scanPrepared(ctx context.Context, q sqlx.QueryerContext, stmt string, args []any, dest ...any) error {
	if s := t.stmtFor(ctx, q, stmt); s != nil {
		if err := s.QueryRowContext(ctx, args...).Scan(dest...); !sqldialect.TooManyStatements(err) {
			return err
		}
	}
	return q.QueryRowxContext(ctx, stmt, args...).Scan(dest...)
}
