package sqlengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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
	// LockWait bounds the lock wait of [Tables.LockHolds] on the server where the
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
	pace   pacing               // of the Prechecks and the prunes (statements.go)
	prep   *preparedSet         // statements prepared once (prepared.go); nil but on MySQL
	mv     *sqldialect.MovesSQL // the movement ledger's statements (tablemoves.go); nil without Config.Moves
	// noCompound: the server ran no compound statement (MySQL, not
	// MariaDB), so MoveLogged runs a transaction (tablemoves.go).
	noCompound atomic.Bool
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
	return t.scalar(ctx, q, "get", t.q.Get, sku)
}

// scalar returns the one number stmt reads of sku through q; op names its
// error.
func (t *Tables) scalar(ctx context.Context, q sqlx.QueryerContext, op, stmt, sku string) (int64, error) {
	var n int64
	err := q.QueryRowxContext(ctx, stmt, sku).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, t.NotFound(sku)
	}
	if err != nil {
		return 0, t.Err(ctx, op, err)
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

// Keys returns the distinct keys of steps, in order.
func Keys(steps []Step) []string {
	var keys []string
	for _, s := range steps {
		if s.Key != "" && !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}
