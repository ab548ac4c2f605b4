// Package sqlstore keeps stock rows and the idempotency ledger in a SQL
// database through [github.com/jmoiron/sqlx], on MariaDB/MySQL, PostgreSQL
// and SQLite. The engine is chosen from db.DriverName(): "mysql"; "pgx" or
// "postgres"; "sqlite" (modernc.org/sqlite) or "sqlite3".
//
// A [Store] is the storage half of the lock strategies (redislock, redlock,
// zklock): they lock a SKU, then Read it and write it back with
// [Store.CompareAndSet]. The SQL strategies optimistic and rowlock use the
// same tables, so a service can move between all of them on the same data.
//
// # Tables
//
// The stock table holds one row per SKU: (sku, stock, version). The version
// moves on with every write, Init included. Its name and column names are
// configurable with [WithSchema], for a service that already has, say, a
// products(id, stock, version) table: the SKU column must be its primary
// key (or unique) and compare bytes exactly (MariaDB: VARBINARY or a _bin
// collation without PAD SPACE; PostgreSQL: COLLATE "C"); stock and version
// must be 64-bit integers.
//
// The ledger table holds (sku, dir, idem_key, remaining, expires_at), with
// primary key (sku, dir, idem_key) and an index on expires_at; expires_at
// is Unix milliseconds from the clock of the writing process. Expired
// entries count as absent and are pruned in bounded batches now and then.
//
// The holds table holds the lines of holds, one row per (hold id, SKU):
// (hold_id, sku, qty, state, expires_at, ended_at), times in Unix
// microseconds on the database's clock. The orders table holds the order
// records of the lock strategies (see below).
//
// With [WithLedger] the Store also keeps the movement ledger of package
// [github.com/stockkit/inventory/ledger] in the table optimistic and
// rowlock keep it in (the stock table's name followed by "_moves"): every
// write of stock records its entry in its own transaction (moves.go).
//
// [Store.CreateTables] creates the tables, as named by the schema, if they
// are absent; run it again after upgrading to a version with more tables.
//
// # Holds
//
// A Store is a [lockmgr.HoldStore], so that the lock strategies over it
// implement [inventory.OrderManager]: a hold line (sku, id) -> qty is a
// row of the holds table, written in the same transaction as the stock
// row's compare-and-set ([Store.Hold]) and deleted in one transaction with
// the units given back ([Store.Unhold]); the held total of a SKU is the sum
// of its lines. An order record is a row of the orders table (id, lines as
// JSON, state, expiry, grace, flags), moved on by [Store.UpdateOrder] in
// one transaction that locks the row: that is where a Confirm racing the
// expiry is decided. Every time is the database's clock. The optimistic
// and rowlock strategies keep their holds in the same holds table, under
// their own hold ids (the lock strategies' ids carry a kind prefix, "h:"):
// do not take holds on one set of tables through both at once.
//
// # Inside a caller's transaction
//
// [Store.InTx] returns the Store bound to a transaction of the caller's:
// every method reads and writes through it, and a method that writes
// several rows does so in a savepoint, so that one that fails leaves the
// caller's transaction as it found it. The caller's rollback undoes the
// stock, the ledger entries, the hold lines and the order records it
// wrote; the rows stay locked until the caller's transaction ends.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/lockmgr"
)

// Schema names the stock table, its columns, the ledger table and the
// holds table. Zero fields take the defaults: table "stock" with columns
// "sku", "stock" and "version", ledger "stock_ledger", and holds the stock
// table's name (its first 57 bytes) followed by "_holds": "stock_holds",
// and orders likewise with "_orders" (its first 56 bytes): "stock_orders".
// Each name must be a plain
// identifier: a letter or underscore, then letters, digits or underscores,
// at most 63 bytes. Names are quoted in SQL: reserved words are fine, and
// on PostgreSQL names are case-sensitive.
type Schema struct {
	Table   string // stock table
	SKU     string // SKU column: primary key, compared byte for byte
	Stock   string // stock column, a 64-bit integer
	Version string // version column, a 64-bit integer
	Ledger  string // idempotency ledger table
	Holds   string // holds table (orders: Reserve, Confirm, Cancel)
	Orders  string // the lock strategies' order records (see HoldStore)
}

// Store keeps stock and idempotency keys in SQL. It is safe for concurrent
// use. Create it with [New].
type Store struct {
	t  *sqlengine.Tables
	h  *holds   // the statements of the holds (holds.go)
	tx *sqlx.Tx // the caller's transaction; nil: the pool
}

var _ lockmgr.HoldStore = (*Store)(nil)

// InTx returns s bound to tx, a transaction of the caller's on s's
// database: see "Inside a caller's transaction" in the package
// documentation. The value is for the goroutine that owns tx, and is good
// until tx ends. CreateTables still runs on the pool.
func (s *Store) InTx(tx *sqlx.Tx) *Store { return &Store{t: s.t, h: s.h, tx: tx} }

// q is where s reads and writes single statements.
func (s *Store) q() sqlx.ExtContext {
	if s.tx != nil {
		return s.tx
	}
	return s.t.DB
}

type config struct {
	schema Schema
	ttl    time.Duration
	moves  bool // WithLedger
}

// Option configures [New]. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithSchema names the tables and columns. The default is the zero Schema:
// every name its default.
func WithSchema(s Schema) Option { return func(c *config) { c.schema = s } }

// WithKeyTTL sets how long the ledger remembers an idempotency key; it must
// be at least a millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// New returns a Store over db. It validates the options and names, and
// chooses the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Store, error) {
	c := config{ttl: inventory.DefaultKeyTTL}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	t, err := sqlengine.New(db, sqlengine.Config{Pkg: "sqlstore", Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl, Moves: c.moves})
	if err != nil {
		return nil, err
	}
	return &Store{t: t, h: newHolds(t)}, nil
}

// CreateTables creates the four tables, as named by the schema, if they
// are absent: the stock table, the idempotency ledger, the holds table
// and the orders table (see "Tables"), with their indexes. Every strategy
// on SQL (optimistic, rowlock and the lock strategies over this Store)
// uses them.
func (s *Store) CreateTables(ctx context.Context) error {
	return s.t.CreateTables(ctx)
}

// Init sets the stock of sku to qty, creating the SKU if absent. It does not
// forget idempotency keys.
func (s *Store) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
		return err
	}
	if s.t.Ledgered() {
		return s.initMoved(ctx, sku, qty)
	}
	return s.t.InitOn(ctx, s.q(), sku, qty)
}

// Get returns the stock of sku; an unknown SKU is [inventory.ErrNotFound].
func (s *Store) Get(ctx context.Context, sku string) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, err
	}
	return s.t.GetOn(ctx, s.q(), sku)
}

// Read returns the stock and version of sku as last committed (one
// autocommit statement, never an older snapshot); an unknown SKU is
// [inventory.ErrNotFound].
func (s *Store) Read(ctx context.Context, sku string) (stock, version int64, err error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, 0, err
	}
	return s.t.Read(ctx, s.q(), sku)
}

// Seen reports whether an unexpired ledger entry holds (sku, dir, key), and
// the remaining value recorded with it.
func (s *Store) Seen(ctx context.Context, sku string, dir driver.Direction, key string) (remaining int64, found bool, err error) {
	if err := validateKey(sku, dir, key); err != nil {
		return 0, false, err
	}
	return s.t.Seen(ctx, s.q(), sku, dir, key)
}

// CompareAndSet atomically sets the stock of sku to newStock and moves its
// version on, if the version is still version; ok=false with a nil error
// means it had moved and nothing was written. When key is not empty the same
// transaction records (sku, dir, key) -> newStock in the ledger for the key
// TTL; if an unexpired entry already holds it, nothing is written and the
// error wraps [inventory.ErrDuplicate] (use Seen for the recorded value).
func (s *Store) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (ok bool, err error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return false, err
	}
	if newStock < 0 || newStock > inventory.MaxStock {
		return false, fmt.Errorf("sqlstore: %w: new stock %d outside 0..%d", inventory.ErrInvalidArgument, newStock, inventory.MaxStock)
	}
	if key != "" {
		if err := validateKey(sku, dir, key); err != nil {
			return false, err
		}
	}
	if s.t.Ledgered() {
		return s.casMoved(ctx, sku, version, newStock, dir, key)
	}
	if key == "" {
		return s.t.Set(ctx, s.q(), sku, version, newStock)
	}
	err = s.t.Atomic(ctx, s.tx, "compare-and-set", func(tx *sqlx.Tx) error {
		if ok, err = s.t.Set(ctx, tx, sku, version, newStock); err != nil || !ok {
			return err
		}
		return s.t.Record(ctx, tx, sku, dir, key, newStock)
	})
	if err != nil {
		return false, err
	}
	if ok {
		s.t.Tidy(ctx, 1)
	}
	return ok, nil
}

func validateKey(sku string, dir driver.Direction, key string) error {
	if dir != driver.DirReduce && dir != driver.DirReturn {
		return fmt.Errorf("sqlstore: %w: direction %q", inventory.ErrInvalidArgument, dir)
	}
	_, err := driver.ValidateMove(sku, 1, []inventory.Option{inventory.WithKey(key)})
	return err
}

// ReadHolds implements [lockmgr.HoldStore]: the stock, version and held
// units of sku in one statement, then, if it has lines past their expiry,
// the ids of up to max of them, earliest first.
func (s *Store) ReadHolds(ctx context.Context, sku string, max int) (stock, version, held int64, expired []string, err error) {
	return s.h.HoldsOf(ctx, s.q(), sku, max)
}

// Hold implements [lockmgr.HoldStore].
func (s *Store) Hold(ctx context.Context, sku string, version, newStock int64, id string, qty int64, expires time.Time) (bool, error) {
	return s.h.HoldLine(ctx, s.tx, sku, version, newStock, id, qty, expires, s.holdMove(ctx, sku, id, qty, newStock))
}

// Unhold implements [lockmgr.HoldStore].
func (s *Store) Unhold(ctx context.Context, sku, id string, sold bool) (int64, error) {
	return s.h.Unhold(ctx, s.tx, sku, id, sold, s.unholdMove(ctx, sku, id, sold))
}

// Held implements [lockmgr.HoldStore].
func (s *Store) Held(ctx context.Context, sku string) (int64, error) {
	return s.t.Held(ctx, s.q(), sku)
}

// CreateOrder implements [lockmgr.HoldStore]. A done record kept past the
// key TTL ([WithKeyTTL]) is forgotten, its id free again.
func (s *Store) CreateOrder(ctx context.Context, id string, lines []inventory.Line, ttl, grace time.Duration) (lockmgr.Order, error) {
	js, err := json.Marshal(lines)
	if err != nil {
		return lockmgr.Order{}, fmt.Errorf("sqlstore: create order %q: %w", id, err)
	}
	row, ok, err := s.h.CreateOrder(ctx, s.tx, id, js, ttl, grace)
	if err != nil {
		return lockmgr.Order{}, err
	}
	if !ok {
		return lockmgr.Order{}, fmt.Errorf("sqlstore: %w: order %q exists", inventory.ErrDuplicate, id)
	}
	return order(id, row)
}

// Order implements [lockmgr.HoldStore].
func (s *Store) Order(ctx context.Context, id string) (lockmgr.Order, error) {
	row, found, err := s.h.ReadOrder(ctx, s.q(), id, false)
	if err != nil {
		return lockmgr.Order{}, err
	}
	if !found || forgotten(row) {
		return lockmgr.Order{}, fmt.Errorf("sqlstore: %w: order %q", inventory.ErrNotFound, id)
	}
	return order(id, row)
}

// forgotten reports whether a done record was kept past its time.
func forgotten(row orderRow) bool {
	return row.Done && row.Kept.Valid && row.Kept.Int64 <= row.Now
}

func order(id string, row orderRow) (lockmgr.Order, error) {
	o := lockmgr.Order{ID: id, State: lockmgr.OrderState(row.State), Expires: time.UnixMilli(row.Expires / 1000),
		Complete: row.Complete, Done: row.Done}
	if err := json.Unmarshal(row.Lines, &o.Lines); err != nil {
		return lockmgr.Order{}, fmt.Errorf("sqlstore: order %q: its lines: %w", id, err)
	}
	return o, nil
}

// UpdateOrder implements [lockmgr.HoldStore]: it locks the record, checks
// the step's condition against the database's clock and writes the step,
// in one transaction.
func (s *Store) UpdateOrder(ctx context.Context, id string, step lockmgr.OrderStep) (o lockmgr.Order, changed bool, err error) {
	err = s.t.Atomic(ctx, s.tx, "update order", func(tx *sqlx.Tx) error {
		row, found, err := s.h.ReadOrder(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if !found || forgotten(row) {
			return fmt.Errorf("sqlstore: %w: order %q", inventory.ErrNotFound, id)
		}
		var drop bool
		row, drop, changed = transition(row, step, s.t.KeyTTL())
		if o, err = order(id, row); err != nil || !changed {
			return err
		}
		if drop {
			return s.h.DropOrder(ctx, tx, id)
		}
		due := row.Abandon
		if row.Complete || row.State != string(lockmgr.OrderHeld) {
			due = row.Expires
		}
		return s.h.SetOrder(ctx, tx, id, row, due)
	})
	if err != nil {
		return lockmgr.Order{}, false, err
	}
	return o, changed, nil
}

// transition returns row moved on by step, if the step's condition holds
// on the database's clock (row.Now): changed=false leaves the record as it
// is; drop=true deletes it. A finished record is kept for keep.
func transition(row orderRow, step lockmgr.OrderStep, keep time.Duration) (next orderRow, drop, changed bool) {
	if row.State == string(lockmgr.OrderHeld) {
		return heldStep(row, step)
	}
	if step != lockmgr.StepFinish || row.Done {
		return row, false, false
	}
	if !row.Complete {
		return row, true, true // a Reserve that never completed: its id is free
	}
	row.Done = true
	row.Kept = sql.NullInt64{Int64: row.Now + keep.Microseconds(), Valid: true}
	return row, false, true
}

// heldStep is [transition] of a held record.
func heldStep(row orderRow, step lockmgr.OrderStep) (next orderRow, drop, changed bool) {
	past := row.Now >= row.Expires
	end := func(s lockmgr.OrderState) (orderRow, bool, bool) {
		if past {
			s = lockmgr.OrderExpired
		}
		row.State = string(s)
		return row, false, true
	}
	switch {
	case step == lockmgr.StepComplete && !row.Complete:
		row.Complete = true
		return row, false, true
	case step == lockmgr.StepConfirm && row.Complete:
		return end(lockmgr.OrderConfirmed)
	case step == lockmgr.StepCancel && row.Complete:
		return end(lockmgr.OrderCancelled)
	case step == lockmgr.StepExpire && (row.Complete && past || !row.Complete && row.Now >= row.Abandon):
		return end(lockmgr.OrderExpired)
	case step == lockmgr.StepAbort && !row.Complete:
		return row, true, true
	}
	return row, false, false
}

// ExpiredOrders implements [lockmgr.HoldStore]. On the pool it also
// deletes a batch of done records kept past the key TTL.
func (s *Store) ExpiredOrders(ctx context.Context, max int) ([]string, error) {
	ids, err := s.h.DueOrders(ctx, s.q(), max)
	if err == nil && s.tx == nil {
		_, _ = s.h.PruneOrders(ctx) // forgotten records already count as absent
	}
	return ids, err
}
