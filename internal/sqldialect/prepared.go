package sqldialect

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
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
// connection itself; SQLite parses in-process.
//
// Only the pool's own calls use them: a statement in a transaction runs as
// text, as before (a caller's transaction need not be on t.DB's pool, and
// the keyed calls pay for BEGIN and COMMIT anyway). A failed prepare is not
// fatal: the call runs the statement as text, and the next prepare is tried
// after prepareRetry. A Tables that becomes unreachable closes its
// statements (runtime.AddCleanup), so that a program creating Managers for
// a while does not use up the server's max_prepared_stmt_count.

// prepareRetry is how long a statement whose prepare failed runs
// unprepared before the next try.
const prepareRetry = 10 * time.Second

// mysqlTooManyStmts is ER_MAX_PREPARED_STMT_COUNT_REACHED: the server's
// max_prepared_stmt_count is used up (by this process or others).
const mysqlTooManyStmts = 1461

// prepared is one statement of a Tables, prepared once on its pool.
type prepared struct {
	db   *sqlx.DB
	text string

	mu    sync.Mutex
	stmt  *sql.Stmt
	retry time.Time // when stmt is nil: no prepare before this
	done  bool      // closed: never prepare again
}

// get returns the prepared statement, preparing it first if need be; nil
// means run the text instead.
func (p *prepared) get(ctx context.Context) *sql.Stmt {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stmt != nil || p.done || time.Now().Before(p.retry) {
		return p.stmt
	}
	s, err := p.db.PrepareContext(ctx, p.text)
	if err != nil {
		p.retry = time.Now().Add(prepareRetry)
		return nil
	}
	p.stmt = s
	return s
}

// close closes the statement for good.
func (p *prepared) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stmt != nil {
		p.stmt.Close()
		p.stmt = nil
	}
	p.done = true
}

// preparedSet is the statements a Tables prepares, by text.
type preparedSet struct{ move, shift *prepared }

// prepare sets up t's prepared statements (MySQL alone) and their closing
// when t becomes unreachable.
func (t *Tables) prepare() {
	if t.Engine != MySQL {
		return
	}
	set := &preparedSet{
		move:  &prepared{db: t.DB, text: t.q.move},
		shift: &prepared{db: t.DB, text: t.q.shift},
	}
	t.prep = set
	runtime.AddCleanup(t, func(s *preparedSet) {
		s.move.close()
		s.shift.close()
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
	}
	return nil
}

// execPrepared runs stmt with args through e on MySQL: as its prepared
// statement when t has one and e is t's pool itself, otherwise (in a
// transaction, too) as text. A prepared run that fails because the server
// has no room for the statement on another connection runs again as text.
func (t *Tables) execPrepared(ctx context.Context, e sqlx.ExtContext, stmt string, args ...any) (sql.Result, error) {
	if db, ok := e.(*sqlx.DB); ok && db == t.DB {
		if s := t.prep.of(stmt).get(ctx); s != nil {
			res, err := s.ExecContext(ctx, args...)
			if n, ok := mysqlNumber(err); !ok || n != mysqlTooManyStmts {
				return res, err
			}
		}
	}
	return e.ExecContext(ctx, stmt, args...)
}
