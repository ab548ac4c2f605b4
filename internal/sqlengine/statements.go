package sqlengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
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
// that [Tables.Begin] began use them; in a caller's transaction (InTx, which
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

	turn  chan struct{} // one slot: held by the call that prepares (or closes)
	retry time.Time     // when stmt is nil: no prepare before this
	done  bool          // closed: never prepare again
}

func newPrepared(db *sqlx.DB, text string) *prepared {
	return &prepared{db: db, text: text, turn: make(chan struct{}, 1)}
}

// get returns the prepared statement, preparing it first if need be; nil
// means run the text instead. A prepare takes a connection of the pool:
// call get only while holding none, lest the pool run dry under callers
// that hold a connection and wait for this one. A call waits for another
// call's prepare only while its ctx lasts: on a stalled server that
// prepare lasts until the other call's deadline, which may be later.
func (p *prepared) get(ctx context.Context) *sql.Stmt {
	if p == nil {
		return nil
	}
	if s := p.stmt.Load(); s != nil {
		return s
	}
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return nil // the call's next statement returns ctx's error
	}
	defer func() { <-p.turn }()
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
	p.turn <- struct{}{}
	defer func() { <-p.turn }()
	if s := p.stmt.Swap(nil); s != nil {
		s.Close()
	}
	p.done = true
}

// preparedSet is the statements a Tables prepares, by text, and the
// transactions of its own in progress, which may use them.
type preparedSet struct {
	move, shift, lockHolds, set *prepared

	own sync.Map // *sqlx.Tx -> struct{}: begun by Tables.Begin, not yet ended
}

// prepare sets up t's prepared statements (MySQL and SQLite) and their
// closing when t becomes unreachable.
func (t *Tables) prepare() {
	if t.Engine == sqldialect.Postgres {
		return
	}
	set := &preparedSet{
		move:      newPrepared(t.DB, t.q.Move),
		shift:     newPrepared(t.DB, t.q.Shift),
		lockHolds: newPrepared(t.DB, t.q.LockHolds),
		set:       newPrepared(t.DB, t.q.Set),
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
		if res, err := s.ExecContext(ctx, args...); err == nil || !sqldialect.TooManyStatements(err) {
			return res, err
		}
	}
	return e.ExecContext(ctx, stmt, args...)
}

// scanPrepared reads the one row of stmt with args through q into dest,
// as execPrepared runs a statement.
func (t *Tables) scanPrepared(ctx context.Context, q sqlx.QueryerContext, stmt string, args []any, dest ...any) error {
	if s := t.stmtFor(ctx, q, stmt); s != nil {
		if err := s.QueryRowContext(ctx, args...).Scan(dest...); err == nil || !sqldialect.TooManyStatements(err) {
			return err
		}
	}
	return q.QueryRowxContext(ctx, stmt, args...).Scan(dest...)
}

// Set is the version compare-and-set: if sku's version is still version it
// sets the stock to stock and moves the version on. ok reports whether it did.
func (t *Tables) Set(ctx context.Context, e sqlx.ExecerContext, sku string, version, stock int64) (ok bool, err error) {
	res, err := t.execPrepared(ctx, e, t.q.Set, stock, sku, version)
	if err != nil {
		return false, t.Err(ctx, "compare-and-set", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, t.Err(ctx, "compare-and-set", err)
	}
	return n == 1, nil
}

// Move adds delta to sku's stock in one conditional UPDATE, if the stock is
// within lo..hi and the SKU has no hold past its TTL to release first, and
// returns the new stock. ok=false means no row matched: sku is unknown, its
// stock is outside lo..hi or it has expired holds (see [Tables.ReadHolds]);
// nothing changed.
func (t *Tables) Move(ctx context.Context, e sqlx.ExtContext, sku string, delta, lo, hi int64) (remaining int64, ok bool, err error) {
	return t.move(ctx, e, t.q.Move, sku, delta, lo, hi)
}

// Shift is Move without the check for expired holds, for a transaction
// that read the SKU's holds before.
func (t *Tables) Shift(ctx context.Context, e sqlx.ExtContext, sku string, delta, lo, hi int64) (remaining int64, ok bool, err error) {
	return t.move(ctx, e, t.q.Shift, sku, delta, lo, hi)
}

func (t *Tables) move(ctx context.Context, e sqlx.ExtContext, stmt, sku string, delta, lo, hi int64) (remaining int64, ok bool, err error) {
	if t.Engine != sqldialect.MySQL {
		err = t.scanPrepared(ctx, e, stmt, []any{delta, sku, lo, hi}, &remaining)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, t.Err(ctx, "update", err)
		}
		return remaining, true, nil
	}
	res, err := t.execPrepared(ctx, e, stmt, delta, sku, lo, hi)
	if err != nil {
		return 0, false, t.Err(ctx, "update", err)
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, t.errIf(ctx, "update", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, false, t.Err(ctx, "update", err)
	}
	return id, true, nil
}

// Peek reads in one statement the stock of sku, the units of its holds
// past their TTL and not yet released (which a move would release first)
// and, when key is not empty, the remaining value recorded for an
// unexpired (sku, dir, key), through q.
func (t *Tables) Peek(ctx context.Context, q sqlx.QueryerContext, sku string, dir driver.Direction, key string) (stock, expired, remaining int64, found bool, err error) {
	var rem sql.NullInt64
	err = q.QueryRowxContext(ctx, t.q.Peek, string(dir), key, time.Now().UnixMilli(), sku).Scan(&stock, &rem, &expired)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, 0, false, t.NotFound(sku)
	}
	if err != nil {
		return 0, 0, 0, false, t.Err(ctx, "read", err)
	}
	return stock, expired, rem.Int64, rem.Valid, nil
}

// pacing is what a Tables keeps of its calls to bound its Prechecks and
// pace its prunes.
type pacing struct {
	writes atomic.Uint32 // keys recorded, to prune now and then (see Tidy)
	peeks  struct {      // the Prechecks' connections (see Precheck)
		once sync.Once
		sem  chan struct{} // nil: no bound
	}
}

// Precheck is the read a keyed move makes before it writes, so that a
// duplicate or a refusal (after a sell-out, nearly every call) takes no
// lock and opens no transaction. A nil error means go on to the write;
// otherwise return the stock and the error it gives: the duplicate (with
// the first call's remaining), the refusal (with the stock) or the read's
// error.
//
// On SQLite, Prechecks take at most half the connections of a pool with a
// limit (sql.DB.SetMaxOpenConns, as it is at the first Precheck; one on a
// pool of one): a call that finds them all taken skips its read (nil
// error) and goes on to the write, which checks the key and the stock
// itself. Without that bound, a crowd of keyed calls queued their reads
// for the pool ahead of the transactions they then waited for, and the
// pool serves its waiters in no order: 2,000 buyers on SQLite's 8
// connections left the writes none for 15 s. MariaDB/MySQL and PostgreSQL
// are not bounded: their pools are larger, and there a call that skipped
// its read on a stalled server went into a write transaction that
// returned up to 240 ms past its deadline (integration/optimistic
// TestStalledServer), where the read returns on time. That lateness was
// the wait for another call's prepare (prepared.get), which now ends with
// the call's ctx: with it, the bound on MariaDB passed TestStalledServer
// single/mariadb 3 of 3 (2026-12-06), where it failed 3 of 3 without.
func (t *Tables) Precheck(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	done, ok := t.peekTurn()
	if !ok {
		return 0, nil
	}
	defer done()
	cur, expired, rem, found, err := t.Peek(ctx, t.DB, sku, dir, key)
	switch {
	case err != nil:
		return 0, err
	case found:
		return rem, t.Duplicate(sku, dir, key)
	}
	if err := t.Check(sku, dir, cur+expired, qty); err != nil {
		return cur, err
	}
	return 0, nil
}

// peekTurn takes one of the Prechecks' connections (see [Tables.Precheck])
// if one is free, and returns the func that gives it back.
func (t *Tables) peekTurn() (done func(), ok bool) {
	t.pace.peeks.once.Do(func() {
		if n := t.DB.Stats().MaxOpenConnections; n > 0 && t.Engine == sqldialect.SQLite {
			t.pace.peeks.sem = make(chan struct{}, max(1, n/2))
		}
	})
	if t.pace.peeks.sem == nil {
		return func() {}, true
	}
	select {
	case t.pace.peeks.sem <- struct{}{}:
		return func() { <-t.pace.peeks.sem }, true
	default:
		return nil, false
	}
}

// Check reports why moving qty units of sku in direction dir from a stock
// of cur is refused, or nil.
func (t *Tables) Check(sku string, dir driver.Direction, cur, qty int64) error {
	if dir == driver.DirReturn {
		return driver.CheckReturn(cur, qty)
	}
	if cur < qty {
		return t.Fail("", fmt.Errorf("%w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, cur, qty))
	}
	return nil
}

func rows(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Tx runs fn in a transaction and commits it; on any error, fn's included,
// it rolls back and returns the error. ctx bounds every round trip. It is
// [Tables.Begin], fn and [Tables.End].
func (t *Tables) Tx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return t.TxWith(ctx, nil, fn)
}

// TxWith is Tx with the transaction options opts (nil: the defaults).
func (t *Tables) TxWith(ctx context.Context, opts *sql.TxOptions, fn func(tx *sqlx.Tx) error) error {
	tx, err := t.Begin(ctx, opts)
	if err != nil {
		return err
	}
	return t.End(ctx, tx, fn(tx))
}

// Begin begins a transaction of t's own with the options opts (nil: the
// defaults), which the caller ends with [Tables.End], whatever happens. It
// prepares t's statements first, if need be (see prepared.get), and its
// transaction runs them prepared.
func (t *Tables) Begin(ctx context.Context, opts *sql.TxOptions) (*sqlx.Tx, error) {
	t.warm(ctx)
	tx, err := t.DB.BeginTxx(ctx, opts)
	if err != nil {
		return nil, t.Err(ctx, "begin", err)
	}
	if t.prep != nil {
		t.prep.own.Store(tx, struct{}{})
	}
	return tx, nil
}

// End ends tx, begun by [Tables.Begin]: with err nil it commits, and
// returns the commit's error; otherwise it rolls back and returns err,
// which says why the transaction failed.
//
// go-sql-driver/mysql's Commit and Rollback do not watch ctx: a COMMIT whose
// answer is lost would block until the TCP connection dies. So on MySQL the
// transaction ends with a COMMIT or ROLLBACK statement, which ctx bounds
// (it closes the connection), and database/sql's own Commit or Rollback,
// a no-op on the server, runs after it in the background.
func (t *Tables) End(ctx context.Context, tx *sqlx.Tx, err error) error {
	if t.prep != nil {
		defer t.prep.own.Delete(tx)
	}
	if err != nil {
		t.end(ctx, tx, "ROLLBACK", tx.Rollback)
		return err
	}
	if err := t.end(ctx, tx, "COMMIT", tx.Commit); err != nil {
		return t.Err(ctx, "commit", err)
	}
	return nil
}

// end ends tx with stmt: on MySQL a statement that ctx bounds, then done,
// database/sql's bookkeeping, in the background; elsewhere done alone.
func (t *Tables) end(ctx context.Context, tx *sqlx.Tx, stmt string, done func() error) error {
	if t.Engine != sqldialect.MySQL {
		return done()
	}
	_, err := tx.ExecContext(ctx, stmt)
	if err != nil {
		done = tx.Rollback
	}
	go func() { _ = done() }()
	return err
}

// pruneEvery is how many recorded keys pass between two prunes of up to
// 1000 expired ones, so pruning keeps pace with recording.
const pruneEvery = 512

// Tidy is called after a commit that recorded n keys. Now and then it
// deletes a bounded batch of expired ledger entries; expired entries already
// count as absent, so a failure here only postpones the cleanup and is
// ignored.
func (t *Tables) Tidy(ctx context.Context, n int) {
	after := t.pace.writes.Add(uint32(n))
	if after/pruneEvery == (after-uint32(n))/pruneEvery {
		return
	}
	_, _ = t.Prune(ctx)
}

// Prune deletes up to 1000 expired ledger entries and reports how many.
func (t *Tables) Prune(ctx context.Context) (int64, error) {
	return t.count(ctx, t.DB, "prune keys", t.q.Prune, time.Now().UnixMilli())
}

// count runs stmt with args through e and returns how many rows it
// affected; its error is op's.
func (t *Tables) count(ctx context.Context, e sqlx.ExecerContext, op, stmt string, args ...any) (int64, error) {
	n, err := rows(e.ExecContext(ctx, stmt, args...))
	if err != nil {
		return 0, t.Err(ctx, op, err)
	}
	return n, nil
}

// RecordAll writes entries for sku into the ledger through e, in as few
// statements as it can: one multi-row INSERT for the new keys, one UPDATE
// per expired row being replaced. ok=false means some row was not written
// because another writer got there first; the caller rolls back.
func (t *Tables) RecordAll(ctx context.Context, e sqlx.ExecerContext, sku string, entries []Entry) (ok bool, err error) {
	now := time.Now().UnixMilli()
	exp := now + t.cfg.KeyTTL.Milliseconds()
	var args []any
	for _, en := range entries {
		if en.Expired {
			n, err := rows(e.ExecContext(ctx, t.q.Renew, en.Remaining, exp, sku, string(en.Dir), en.Key, now))
			if err != nil || n != 1 {
				return false, t.errIf(ctx, "record keys", err)
			}
			continue
		}
		args = append(args, sku, string(en.Dir), en.Key, en.Remaining, exp)
	}
	if len(args) == 0 {
		return true, nil
	}
	n, err := rows(e.ExecContext(ctx, t.q.Expand(t.q.Insert, len(args)/5), args...))
	if err != nil {
		return false, t.Err(ctx, "record keys", err)
	}
	return n == int64(len(args)/5), nil
}

func (t *Tables) errIf(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	return t.Err(ctx, op, err)
}

// LockHolds reads the row of sku, and whether the SKU has expired holds to
// release, and locks the row until tx ends: SELECT ... FOR UPDATE, or on
// SQLite an UPDATE that takes the database's write lock. On MySQL's
// REPEATABLE READ, lock every row a transaction needs before its first
// plain read, so that the reads after the locks see every transaction that
// committed before them.
func (t *Tables) LockHolds(ctx context.Context, tx *sqlx.Tx, sku string) (Row, error) {
	if t.q.LockTimeout != "" {
		if _, err := tx.ExecContext(ctx, t.q.LockTimeout); err != nil {
			return Row{}, t.Err(ctx, "set lock timeout", err)
		}
	}
	var r Row
	err := t.scanPrepared(ctx, tx, t.q.LockHolds, []any{sku}, &r.Stock, &r.Version, &r.Expired)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, t.NotFound(sku)
	}
	if err != nil {
		return Row{}, t.Err(ctx, "lock", err)
	}
	return r, nil
}

// Release marks the lines refs of sku expired, through e, which must hold
// the SKU's row (locked or compare-and-set in the same transaction) and
// gives their units back to the stock itself. ok=false: some line was no
// longer held; the caller rolls back.
func (t *Tables) Release(ctx context.Context, e sqlx.ExecerContext, sku string, refs []Ref) (ok bool, err error) {
	if len(refs) == 0 {
		return true, nil
	}
	args := make([]any, 0, 1+len(refs))
	args = append(args, sku)
	for _, r := range refs {
		args = append(args, r.ID)
	}
	n, err := rows(e.ExecContext(ctx, t.q.Expand(t.q.Release, len(refs)), args...))
	if err != nil {
		return false, t.Err(ctx, "release holds", err)
	}
	return n == int64(len(refs)), nil
}

// Ledgered reports whether t keeps a movement ledger (Config.Moves).
func (t *Tables) Ledgered() bool { return t.mv != nil }
