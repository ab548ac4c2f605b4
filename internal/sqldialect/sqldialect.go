// Package sqldialect is the SQL layer that sqlstore, optimistic and rowlock
// share: what differs between MariaDB/MySQL, PostgreSQL and SQLite
// (placeholders, identifier quoting, upserts, how an UPDATE reports the new
// value, which errors mean "lock contention"), and the statements over the
// stock table, the idempotency ledger, the holds table and the orders
// table, built once from a validated schema, with [Tables] to run them.
// The engine that runs the order calls over them (transactions, retries,
// holds) is package sqlengine; sqlstore keeps the statements of its holds
// (lockmgr.HoldStore) itself, built with [Tables.Render].
//
// Hold times are Unix microseconds on the database's clock, an expression
// each engine's file defines once ({{.Now}} in the statements); idempotency
// keys keep their expiry in Unix milliseconds of the writing process.
//
// Each engine's statements are written out whole in its own file (mysql.go,
// postgres.go, sqlite.go) as text/template text; testdata/statements.golden
// shows them rendered for the default schema. Every statement takes its
// values as bind parameters; the only text substituted into SQL is
// identifiers that passed [Schema.validate] and are then quoted, and the
// lock wait as an integer.
//
// The package does not import go-sql-driver/mysql, so that a program on
// PostgreSQL or SQLite does not link it: MySQL errors are recognised by
// reflection (see mysqlNumber).
package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
)

// Engine is a SQL engine family.
type Engine int

// The engines, chosen from the sqlx driver name.
const (
	MySQL    Engine = iota + 1 // "mysql": MariaDB and MySQL
	Postgres                   // "pgx", "postgres"
	SQLite                     // "sqlite" (modernc.org/sqlite), "sqlite3"
)

func (e Engine) String() string {
	return [...]string{"unknown", "mysql", "postgres", "sqlite"}[e]
}

// EngineOf maps a database/sql driver name to its engine.
func EngineOf(driverName string) (Engine, error) {
	switch driverName {
	case "mysql":
		return MySQL, nil
	case "pgx", "postgres":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, fmt.Errorf("%w: unsupported sql driver %q (want mysql, pgx, postgres, sqlite or sqlite3)",
		inventory.ErrInvalidArgument, driverName)
}

// Schema names the stock table, its columns, the idempotency ledger and
// the holds table. Zero fields take the defaults below.
type Schema struct {
	Table, SKU, Stock, Version, Ledger, Holds, Orders string
}

// Default names.
const (
	DefaultTable   = "stock"
	DefaultSKU     = "sku"
	DefaultStock   = "stock"
	DefaultVersion = "version"
	DefaultLedger  = "stock_ledger"

	// HoldsSuffix names the default holds table: the stock table's name
	// (its first 57 bytes) and this suffix, "stock_holds" for the default
	// table.
	HoldsSuffix = "_holds"

	// OrdersSuffix names the default orders table (the lock strategies'
	// order records, see sqlstore) in the same way: "stock_orders".
	OrdersSuffix = "_orders"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// WithDefaults fills the zero fields of s.
func (s Schema) WithDefaults() Schema {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.Table, DefaultTable)
	def(&s.SKU, DefaultSKU)
	def(&s.Stock, DefaultStock)
	def(&s.Version, DefaultVersion)
	def(&s.Ledger, DefaultLedger)
	def(&s.Holds, s.Table[:min(len(s.Table), 63-len(HoldsSuffix))]+HoldsSuffix)
	def(&s.Orders, s.Table[:min(len(s.Table), 63-len(OrdersSuffix))]+OrdersSuffix)
	return s
}

// validate refuses any name that is not a plain identifier: a letter or
// underscore, then letters, digits and underscores, at most 63 bytes.
func (s Schema) validate() error {
	for _, f := range []struct{ what, v string }{
		{"table", s.Table}, {"sku column", s.SKU}, {"stock column", s.Stock},
		{"version column", s.Version}, {"ledger table", s.Ledger}, {"holds table", s.Holds},
		{"orders table", s.Orders},
	} {
		if !identRE.MatchString(f.v) {
			return fmt.Errorf("%w: %s name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)",
				inventory.ErrInvalidArgument, f.what, f.v)
		}
	}
	if names := []string{s.Table, s.Ledger, s.Holds, s.Orders}; len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		return fmt.Errorf("%w: table %q, ledger %q, holds %q and orders %q must differ",
			inventory.ErrInvalidArgument, s.Table, s.Ledger, s.Holds, s.Orders)
	}
	if s.SKU == s.Stock || s.SKU == s.Version || s.Stock == s.Version {
		return fmt.Errorf("%w: sku, stock and version columns must differ", inventory.ErrInvalidArgument)
	}
	return nil
}

// Config configures [New].
type Config struct {
	Pkg    string        // error prefix: the public package's name
	Schema Schema        // validated and defaulted by New
	KeyTTL time.Duration // how long the ledger keeps a key; must be > 0
	// LockWait bounds the lock wait of [Tables.Lock] on the server where the
	// engine can (PostgreSQL lock_timeout, MariaDB FOR UPDATE WAIT n);
	// zero leaves the server's setting.
	LockWait time.Duration
	// Moves keeps the movement ledger (moves.go): [Tables.CreateTables]
	// creates its table and [Tables.WriteMoves] writes it.
	Moves bool
}

// Tables runs the shared statements over one schema on one database.
type Tables struct {
	DB     *sqlx.DB
	Engine Engine
	cfg    Config
	q      statements
	writes atomic.Uint32 // keys recorded, to prune now and then
	peeks  struct {      // the Prechecks' connections (see Precheck)
		once sync.Once
		sem  chan struct{} // nil: no bound
	}
	prep *preparedSet // statements prepared once (prepared.go); nil but on MySQL
	n    names        // what the statements' templates use
	mv   *movesSQL    // the movement ledger's statements (moves.go); nil without Config.Moves
}

// statements holds one engine's SQL (mysql.go, postgres.go, sqlite.go) as
// text/template text over [names]; [build] renders it into the same struct.
// keys and insert hold one {{rows "..."}}, the list of n rows of a batch,
// which [expand] writes out per call; record is insert with one row.
//
// The holds statements (see holds.go) follow the same rules; readHolds,
// release and reserve are batch statements.
type statements struct {
	quote string // identifier quote
	now   string // the database's clock, in Unix microseconds (see [names])

	get, read, lock, lockTimeout, init, set, move string
	shift                                         string // move without the holds guard
	seen, peek, record, renew, prune              string
	keys, insert                                  string

	lockHolds, expired, lines, lockLines, confirm, end, forget string
	held, due, pruneHolds                                      string
	readHolds, release, reserve                                string
	readHolds1                                                 string // readHolds with one row

	create []string
}

// names is what a statement's template may use: the schema's identifiers,
// validated and quoted, the lock wait in the units the engines take, and
// the engine's clock.
type names struct {
	Table, SKU, Stock, Version, Ledger string
	Index                              string // the ledger's expires_at index
	WaitSeconds                        int64  // MariaDB's FOR UPDATE WAIT n: LockWait rounded up; 0 for none
	LockTimeoutMillis                  int64  // PostgreSQL's lock_timeout; 0 for none

	Holds             string // the holds table
	BySKU, Due, Ended string // its indexes
	Orders, OrdersDue string // the orders table and its index
	Now               string // the database's clock as Unix microseconds: an expression
	MaxRelease        int    // expired holds one call of a SKU releases at most
}

// New validates cfg and builds the statements for db's engine. It does no I/O.
func New(db *sqlx.DB, cfg Config) (*Tables, error) {
	if db == nil {
		return nil, fmt.Errorf("%s: %w: nil *sqlx.DB", cfg.Pkg, inventory.ErrInvalidArgument)
	}
	eng, err := EngineOf(db.DriverName())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Pkg, err)
	}
	cfg.Schema = cfg.Schema.WithDefaults()
	if err := cfg.Schema.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Pkg, err)
	}
	if cfg.KeyTTL < time.Millisecond {
		return nil, fmt.Errorf("%s: %w: key TTL %v is less than 1ms", cfg.Pkg, inventory.ErrInvalidArgument, cfg.KeyTTL)
	}
	if cfg.LockWait < 0 {
		return nil, fmt.Errorf("%s: %w: negative lock timeout %v", cfg.Pkg, inventory.ErrInvalidArgument, cfg.LockWait)
	}
	if cfg.Moves {
		if err := checkMoves(cfg.Schema); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Pkg, err)
		}
	}
	t := &Tables{DB: db, Engine: eng, cfg: cfg}
	t.q, t.n = build(eng, cfg)
	if cfg.Moves {
		t.mv = buildMoves(eng, cfg.Schema, t.n)
	}
	t.prepare()
	return t, nil
}

// rowsMark brackets the row of a batch list in a rendered statement.
const rowsMark = "\x00"

// build renders eng's statements over cfg's schema, and returns the names
// they used.
func build(eng Engine, cfg Config) (statements, names) {
	text := map[Engine]statements{MySQL: mysqlSQL, Postgres: postgresSQL, SQLite: sqliteSQL}[eng]
	quote := func(id string) string { return text.quote + id + text.quote }
	s := cfg.Schema
	n := names{
		Table: quote(s.Table), SKU: quote(s.SKU), Stock: quote(s.Stock), Version: quote(s.Version), Ledger: quote(s.Ledger),
		Index: quote(s.Ledger[:min(len(s.Ledger), 52)] + "_expires_at"), // within 63 bytes
		Holds: quote(s.Holds), Now: text.now, MaxRelease: MaxRelease,
		BySKU:  quote(s.Holds[:min(len(s.Holds), 56)] + "_by_sku"),
		Due:    quote(s.Holds[:min(len(s.Holds), 59)] + "_due"),
		Ended:  quote(s.Holds[:min(len(s.Holds), 57)] + "_ended"),
		Orders: quote(s.Orders), OrdersDue: quote(s.Orders[:min(len(s.Orders), 59)] + "_due"),
	}
	if cfg.LockWait > 0 {
		n.WaitSeconds = int64((cfg.LockWait + time.Second - 1) / time.Second)
		n.LockTimeoutMillis = max(1, cfg.LockWait.Milliseconds())
	}
	render := func(src string) string { return n.render(src) }
	q := statements{quote: text.quote, now: text.now, keys: render(text.keys), insert: render(text.insert),
		readHolds: render(text.readHolds), release: render(text.release), reserve: render(text.reserve)}
	for _, f := range []struct{ dst, src *string }{
		{&q.get, &text.get}, {&q.read, &text.read}, {&q.lock, &text.lock}, {&q.lockTimeout, &text.lockTimeout},
		{&q.init, &text.init}, {&q.set, &text.set}, {&q.move, &text.move}, {&q.shift, &text.shift},
		{&q.seen, &text.seen}, {&q.peek, &text.peek}, {&q.renew, &text.renew}, {&q.prune, &text.prune},
		{&q.lockHolds, &text.lockHolds}, {&q.expired, &text.expired}, {&q.lines, &text.lines},
		{&q.lockLines, &text.lockLines}, {&q.confirm, &text.confirm}, {&q.end, &text.end},
		{&q.forget, &text.forget}, {&q.held, &text.held}, {&q.due, &text.due}, {&q.pruneHolds, &text.pruneHolds},
	} {
		*f.dst = bind(eng, render(*f.src))
	}
	q.record = expand(eng, q.insert, 1)
	q.readHolds1 = expand(eng, q.readHolds, 1)
	for _, c := range text.create {
		q.create = append(q.create, render(c))
	}
	return q, n
}

// render executes src, a statement's template, over n.
func (n names) render(src string) string { return renderOver(src, n) }

// renderOver executes src, a statement's template, over data.
func renderOver(src string, data any) string {
	tmpl := template.Must(template.New("").Funcs(template.FuncMap{
		"rows": func(row string) string { return rowsMark + row + rowsMark },
	}).Parse(src))
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		panic(err) // names has every field the statements use: a bug, which every test hits
	}
	return dedent(b.String())
}

// Render builds a statement of another package's (sqlstore's) over t's
// schema, as t's own are built: src is text/template text over the quoted
// names of the schema ({{.Table}}, {{.SKU}}, {{.Stock}}, {{.Version}},
// {{.Ledger}}, {{.Holds}}, {{.Orders}}) and {{.Now}}, the database's clock
// in Unix microseconds, with ? placeholders (numbered on PostgreSQL).
func (t *Tables) Render(src string) string { return bind(t.Engine, t.n.render(src)) }

// Rows returns the rows res affected, or err.
func Rows(res sql.Result, err error) (int64, error) { return rows(res, err) }

// dedent removes from the second and later lines of a statement the
// indentation they share in the Go source.
func dedent(q string) string {
	lines := strings.Split(q, "\n")
	indent := -1
	for _, l := range lines[1:] {
		if n := len(l) - len(strings.TrimLeft(l, "\t")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i := 1; i < len(lines); i++ {
		lines[i] = lines[i][indent:]
	}
	return strings.Join(lines, "\n")
}

// expand writes out batch statement q, rendered by [build], with n rows.
func expand(eng Engine, q string, n int) string {
	head, rest, _ := strings.Cut(q, rowsMark)
	row, tail, _ := strings.Cut(rest, rowsMark)
	return bind(eng, head+strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")+tail)
}

// bind numbers the ? placeholders of q $1, $2, ... on PostgreSQL.
func bind(eng Engine, q string) string {
	if eng == Postgres {
		return sqlx.Rebind(sqlx.DOLLAR, q)
	}
	return q
}

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

func (t *Tables) contention(err error) bool { return Contention(t.Engine, err) }

// Contention reports whether err, from a statement on engine eng, means
// lock contention: a deadlock, a lock wait timeout, a serialization
// failure or a busy database.
func Contention(eng Engine, err error) bool {
	switch eng {
	case MySQL:
		return mysqlContention(err)
	case Postgres:
		return postgresContention(err)
	case SQLite:
		return sqliteContention(err)
	}
	return false
}

// NotFound is the error for an unknown SKU.
func (t *Tables) NotFound(sku string) error {
	return t.Fail("", fmt.Errorf("%w: %q", inventory.ErrNotFound, sku))
}

// CreateTables creates the stock, ledger, holds and orders tables, with
// their indexes, and the movement ledger's table when t keeps one, if they
// are absent.
func (t *Tables) CreateTables(ctx context.Context) error {
	create := t.q.create
	if t.mv != nil {
		create = append(slices.Clip(create), t.mv.create...)
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
	if _, err := e.ExecContext(ctx, t.q.init, sku, qty); err != nil {
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
	err := q.QueryRowxContext(ctx, t.q.get, sku).Scan(&n)
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
	err = q.QueryRowxContext(ctx, t.q.read, sku).Scan(&stock, &version)
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
	if t.q.lockTimeout != "" {
		if _, err := tx.ExecContext(ctx, t.q.lockTimeout); err != nil {
			return 0, 0, t.Err(ctx, "set lock timeout", err)
		}
	}
	err = tx.QueryRowxContext(ctx, t.q.lock, sku).Scan(&stock, &version)
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
	res, err := t.execPrepared(ctx, e, t.q.set, stock, sku, version)
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
	return t.move(ctx, e, t.q.move, sku, delta, lo, hi)
}

// Shift is Move without the check for expired holds, for a transaction
// that read the SKU's holds before.
func (t *Tables) Shift(ctx context.Context, e sqlx.ExtContext, sku string, delta, lo, hi int64) (remaining int64, ok bool, err error) {
	return t.move(ctx, e, t.q.shift, sku, delta, lo, hi)
}

func (t *Tables) move(ctx context.Context, e sqlx.ExtContext, stmt, sku string, delta, lo, hi int64) (remaining int64, ok bool, err error) {
	if t.Engine != MySQL {
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
	err = q.QueryRowxContext(ctx, t.q.seen, sku, string(dir), key, time.Now().UnixMilli()).Scan(&remaining)
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
	err = q.QueryRowxContext(ctx, t.q.peek, string(dir), key, time.Now().UnixMilli(), sku).Scan(&stock, &rem, &expired)
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
// Prechecks take at most half the connections of a pool with a limit
// (sql.DB.SetMaxOpenConns, as it is at the first Precheck; one on a pool
// of one): a call that finds them all taken skips its read (nil error) and
// goes on to the write, which checks the key and the stock itself.
// Without that bound, a crowd of keyed calls queued their reads for the
// pool ahead of the transactions they then waited for, and the pool serves
// its waiters in no order: 2,000 buyers on SQLite's 8 connections left the
// writes none for 15 s.
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
		if n := t.DB.Stats().MaxOpenConnections; n > 0 {
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
	n, err := rows(e.ExecContext(ctx, t.q.record, sku, string(dir), key, remaining, exp))
	if err == nil && n == 0 {
		n, err = rows(e.ExecContext(ctx, t.q.renew, remaining, exp, sku, string(dir), key, now))
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
	if t.Engine != MySQL {
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
	return t.count(ctx, t.DB, "prune keys", t.q.prune, time.Now().UnixMilli())
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
	rows, err := q.QueryxContext(ctx, expand(t.Engine, t.q.keys, len(keys)), args...)
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
			n, err := rows(e.ExecContext(ctx, t.q.renew, en.Remaining, exp, sku, string(en.Dir), en.Key, now))
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
	n, err := rows(e.ExecContext(ctx, expand(t.Engine, t.q.insert, len(args)/5), args...))
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
