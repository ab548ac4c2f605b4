package sqlengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/sqldialect"
)

// Config configures [New].
type Config struct {
	Pkg    string            // error prefix: the public package's name
	Schema sqldialect.Schema // validated and defaulted by New
	KeyTTL time.Duration     // how long the ledger keeps a key; must be > 0
	// LockWait bounds the lock wait of [Tables.Lock] on the server where the
	// engine can (PostgreSQL lock_timeout, MariaDB FOR UPDATE WAIT n);
	// zero leaves the server's setting.
	LockWait time.Duration
	// Moves keeps the movement ledger (tablemoves.go): [Tables.CreateTables]
	// creates its table and [Tables.WriteMoves] writes it.
	Moves bool
}

// Tables runs the shared statements over one schema on one database.
type Tables struct {
	DB     *sqlx.DB
	Engine sqldialect.Engine
	cfg    Config
	q      *sqldialect.Statements
	writes atomic.Uint32 // keys recorded, to prune now and then
	peeks  struct {      // the Prechecks' connections (see Precheck)
		once sync.Once
		sem  chan struct{} // nil: no bound
	}
	prep *preparedSet         // statements prepared once (prepared.go); nil but on MySQL
	mv   *sqldialect.MovesSQL // the movement ledger's statements (tablemoves.go); nil without Config.Moves
}

// New validates cfg and builds the statements for db's engine. It does no I/O.
func New(db *sqlx.DB, cfg Config) (*Tables, error) {
	if db == nil {
		return nil, fmt.Errorf("%s: %w: nil *sqlx.DB", cfg.Pkg, inventory.ErrInvalidArgument)
	}
	eng, err := sqldialect.EngineOf(db.DriverName())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Pkg, err)
	}
	cfg.Schema = cfg.Schema.WithDefaults()
	if err := cfg.Schema.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Pkg, err)
	}
	if cfg.KeyTTL < time.Millisecond {
		return nil, fmt.Errorf("%s: %w: key TTL %v is less than 1ms", cfg.Pkg, inventory.ErrInvalidArgument, cfg.KeyTTL)
	}
	if cfg.LockWait < 0 {
		return nil, fmt.Errorf("%s: %w: negative lock timeout %v", cfg.Pkg, inventory.ErrInvalidArgument, cfg.LockWait)
	}
	if cfg.Moves {
		if err := sqldialect.CheckMoves(cfg.Schema); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Pkg, err)
		}
	}
	t := &Tables{DB: db, Engine: eng, cfg: cfg}
	t.q = sqldialect.Build(eng, cfg.Schema, cfg.LockWait, cfg.Moves)
	t.mv = t.q.Moves
	t.prepare()
	return t, nil
}

// Render builds a statement of another package's (sqlstore's) over t's
// schema, as t's own are built: see [sqldialect.Statements.Render].
func (t *Tables) Render(src string) string { return t.q.Render(src) }

// Rows returns the rows res affected, or err.
func Rows(res sql.Result, err error) (int64, error) { return rows(res, err) }

// Err wraps err from operation op: with ErrContention when the engine
// reports a deadlock, a lock wait timeout or a busy database, and with
// ctx.Err() when ctx is done, so errors.Is finds the sentinel, the context
// error and, with errors.As, the driver's own error.
func (t *Tables) Err(ctx context.Context, op string, err error) error {
	if t.contention(err) {
		return t.Fail(op, fmt.Errorf("%w: %w", inventory.ErrContention, err))
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return t.Fail(op, fmt.Errorf("%w: %w", err, cerr))
	}
	return t.Fail(op, err)
}

// Fail is err as the error of the strategy's operation op ("" when err
// says what failed): a [*front.Error] naming the strategy, which its face
// passes on as it is.
func (t *Tables) Fail(op string, err error) error {
	return &front.Error{Strategy: t.cfg.Pkg, Op: op, Err: err}
}

func (t *Tables) contention(err error) bool { return sqldialect.Contention(t.Engine, err) }

// NotFound is the error for an unknown SKU.
func (t *Tables) NotFound(sku string) error {
	return t.Fail("", fmt.Errorf("%w: %q", inventory.ErrNotFound, sku))
}

// CreateTables creates the stock, ledger, holds and orders tables, with
// their indexes, and the movement ledger's table when t keeps one, if they
// are absent.
func (t *Tables) CreateTables(ctx context.Context) error {
	create := t.q.Create
	if t.mv != nil {
		create = append(slices.Clip(create), t.mv.Create...)
	}
	for _, stmt := range create {
		if _, err := t.DB.ExecContext(ctx, stmt); err != nil {
			return t.Err(ctx, "create tables", err)
		}
	}
	return nil
}

// Init sets the stock of sku to qty, creating the row if absent, and moves
// its version on so that a compare-and-set that read before it fails.
func (t *Tables) Init(ctx context.Context, sku string, qty int64) error {
	return t.InitOn(ctx, t.DB, sku, qty)
}

// InitOn is Init through e, a caller's transaction.
func (t *Tables) InitOn(ctx context.Context, e sqlx.ExecerContext, sku string, qty int64) error {
	if _, err := e.ExecContext(ctx, t.q.Init, sku, qty); err != nil {
		return t.Err(ctx, "init", err)
	}
	return nil
}

// Get returns the stock of sku.
func (t *Tables) Get(ctx context.Context, sku string) (int64, error) {
	return t.GetOn(ctx, t.DB, sku)
}

// GetOn is Get through q, a caller's transaction.
func (t *Tables) GetOn(ctx context.Context, q sqlx.QueryerContext, sku string) (int64, error) {
	var n int64
	err := q.QueryRowxContext(ctx, t.q.Get, sku).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, t.NotFound(sku)
	}
	if err != nil {
		return 0, t.Err(ctx, "get", err)
	}
	return n, nil
}

// Read returns the stock and version of sku as of one statement through q.
// Through the *sqlx.DB (autocommit) that is the latest committed row.
func (t *Tables) Read(ctx context.Context, q sqlx.QueryerContext, sku string) (stock, version int64, err error) {
	err = q.QueryRowxContext(ctx, t.q.Read, sku).Scan(&stock, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, t.NotFound(sku)
	}
	if err != nil {
		return 0, 0, t.Err(ctx, "read", err)
	}
	return stock, version, nil
}

// Lock reads the row of sku and locks it until tx ends: SELECT ... FOR
// UPDATE, or on SQLite an UPDATE that takes the database's write lock. Lock
// must be the first statement of tx, so that on MySQL's REPEATABLE READ the
// reads after it see every transaction that committed before it.
func (t *Tables) Lock(ctx context.Context, tx *sqlx.Tx, sku string) (stock, version int64, err error) {
	if t.q.LockTimeout != "" {
		if _, err := tx.ExecContext(ctx, t.q.LockTimeout); err != nil {
			return 0, 0, t.Err(ctx, "set lock timeout", err)
		}
	}
	err = tx.QueryRowxContext(ctx, t.q.Lock, sku).Scan(&stock, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, t.NotFound(sku)
	}
	if err != nil {
		return 0, 0, t.Err(ctx, "lock", err)
	}
	return stock, version, nil
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

// Seen returns the remaining value recorded for an unexpired key.
func (t *Tables) Seen(ctx context.Context, q sqlx.QueryerContext, sku string, dir driver.Direction, key string) (remaining int64, found bool, err error) {
	err = q.QueryRowxContext(ctx, t.q.Seen, sku, string(dir), key, time.Now().UnixMilli()).Scan(&remaining)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.Err(ctx, "read key", err)
	}
	return remaining, true, nil
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
// TestStalledServer), where the read returns on time.
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
	t.peeks.once.Do(func() {
		if n := t.DB.Stats().MaxOpenConnections; n > 0 && t.Engine == sqldialect.SQLite {
			t.peeks.sem = make(chan struct{}, max(1, n/2))
		}
	})
	if t.peeks.sem == nil {
		return func() {}, true
	}
	select {
	case t.peeks.sem <- struct{}{}:
		return func() { <-t.peeks.sem }, true
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

// Record writes (sku, dir, key) -> remaining into the ledger through e,
// normally the transaction that moved the stock. An expired entry is
// replaced; an unexpired one is left, and the error wraps
// [inventory.ErrDuplicate]: the call is the repeat of one that took effect.
func (t *Tables) Record(ctx context.Context, e sqlx.ExecerContext, sku string, dir driver.Direction, key string, remaining int64) error {
	now := time.Now().UnixMilli()
	exp := now + t.cfg.KeyTTL.Milliseconds()
	n, err := rows(e.ExecContext(ctx, t.q.Record, sku, string(dir), key, remaining, exp))
	if err == nil && n == 0 {
		n, err = rows(e.ExecContext(ctx, t.q.Renew, remaining, exp, sku, string(dir), key, now))
	}
	if err != nil {
		return t.Err(ctx, "record key", err)
	}
	if n == 0 {
		return t.Duplicate(sku, dir, key)
	}
	return nil
}

// Duplicate is the error for a key that already took effect.
func (t *Tables) Duplicate(sku string, dir driver.Direction, key string) error {
	return t.Fail("", fmt.Errorf("%w: %s %q key %q", inventory.ErrDuplicate, dir, sku, key))
}

func rows(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Tx runs fn in a transaction and commits it; on any error, fn's included,
// it rolls back and returns the error. ctx bounds every round trip.
//
// go-sql-driver/mysql's Commit and Rollback do not watch ctx: a COMMIT whose
// answer is lost would block until the TCP connection dies. So on MySQL the
// transaction ends with a COMMIT or ROLLBACK statement, which ctx bounds
// (it closes the connection), and database/sql's own Commit or Rollback,
// a no-op on the server, runs after it in the background.
func (t *Tables) Tx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return t.TxWith(ctx, nil, fn)
}

// TxWith is Tx with the transaction options opts (nil: the defaults).
func (t *Tables) TxWith(ctx context.Context, opts *sql.TxOptions, fn func(tx *sqlx.Tx) error) error {
	t.warm(ctx)
	tx, err := t.DB.BeginTxx(ctx, opts)
	if err != nil {
		return t.Err(ctx, "begin", err)
	}
	defer t.ownTx(tx)()
	if err := fn(tx); err != nil {
		t.end(ctx, tx, "ROLLBACK", tx.Rollback) // the transaction failed; its own error says why
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
	after := t.writes.Add(uint32(n))
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

// Entry is one idempotency key of a SKU in the ledger.
type Entry struct {
	Dir       driver.Direction
	Key       string
	Remaining int64
	// Expired, from [Tables.Entries]: the row exists but has expired. To
	// [Tables.RecordAll]: replace that expired row.
	Expired bool
}

// Entries returns the ledger rows of sku for any of keys, in either
// direction, expired ones included and marked.
func (t *Tables) Entries(ctx context.Context, q sqlx.QueryerContext, sku string, keys []string) ([]Entry, error) {
	args := make([]any, 0, 1+len(keys))
	args = append(args, sku)
	for _, k := range keys {
		args = append(args, k)
	}
	rows, err := q.QueryxContext(ctx, t.q.Expand(t.q.Keys, len(keys)), args...)
	if err != nil {
		return nil, t.Err(ctx, "read keys", err)
	}
	defer rows.Close()
	now := time.Now().UnixMilli()
	var es []Entry
	for rows.Next() {
		var e Entry
		var dir string
		var exp int64
		if err := rows.Scan(&dir, &e.Key, &e.Remaining, &exp); err != nil {
			return nil, t.Err(ctx, "read keys", err)
		}
		e.Dir, e.Expired = driver.Direction(dir), exp <= now
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		return nil, t.Err(ctx, "read keys", err)
	}
	return es, nil
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
