// Package rowlock is an [inventory.StockManager] that locks the SKU's SQL
// row for the length of one transaction: SELECT ... FOR UPDATE, check,
// UPDATE, commit. It runs on MariaDB/MySQL, PostgreSQL and SQLite through
// [github.com/jmoiron/sqlx], on the tables of
// [github.com/stockkit/inventory/sqlstore], shared with the optimistic
// strategy and the lock strategies' SQL store.
//
// SQLite has no row locks: there the transaction starts with a write (an
// UPDATE that changes nothing) and so holds the database's write lock from
// its first statement, as an immediate transaction does, whatever the DSN's
// _txlock. Its writers take turns; with modernc.org/sqlite, a pool of one
// connection avoids their busy polling.
//
// # Combining
//
// Calls of one Manager on one SKU combine: while a transaction of the SKU
// is in flight, the Reduce and Return calls that arrive queue up, and the
// next transaction applies them all (up to 128; the rest wait for the
// one after), in arrival order: it locks the row once, releases the SKU's
// expired holds, checks and applies each call in turn against the stock
// the calls before it left, writes the stock once with the ledger rows
// of its keyed calls, and commits. Each call still gets its own result:
// its own remaining value, or ErrInsufficientStock, or ErrDuplicate (a key
// used twice in one batch is a duplicate of its first use). A lone call is
// one transaction with the round trips of an uncombined one. On a hot SKU
// each Manager (each process) so holds the row lock once per batch rather
// than once per call; the Managers of several processes take turns on it.
//
// Each transaction runs on a goroutine of its own, not on a caller's: a
// caller whose ctx ends leaves at once, with ctx's error (wrapped as
// "outcome unknown" if its transaction had begun: it may yet take
// effect, as any call that ends with its context may have; a keyed retry
// tells), and a caller whose ctx ended before its transaction began is
// left out of it. A transaction that fails (the lock timeout, a lost
// connection) changes nothing and returns its error to every call in it.
// Calls inside a caller's transaction ([Manager.InTx]) never combine.
//
// # Lock waits
//
// A call waits for the row lock at most until ctx is done or the lock
// timeout ([WithLockTimeout]) passes, then returns an error wrapping
// [inventory.ErrContention], as it does when the engine reports a deadlock,
// a serialization failure or a busy database. Any error rolls the whole
// transaction back: nothing is left half-done. The calls combined in one
// transaction wait for the lock together; a call that queued behind the
// SKU's transaction in flight waits for that one to end first.
//
// The lock timeout is enforced by the server where it can be: PostgreSQL's
// lock_timeout (SET LOCAL, so it ends with the transaction; milliseconds),
// MariaDB's SELECT ... FOR UPDATE WAIT n (whole seconds, so the timeout is
// rounded up to the next second: 1.2s waits 2s). MySQL has no
// per-statement form and its innodb_lock_wait_timeout (50 s by default) is
// a session setting shared with whatever else uses the connection; so on
// every server engine the call also abandons the lock statement itself
// after twice that bound, closing its connection. A call therefore gives
// up within the lock timeout (rounded up to whole seconds on MariaDB/MySQL)
// where the server applies it, and within twice that on MySQL. On SQLite,
// which has no lock timeout of its own but the DSN's busy_timeout, the
// lock timeout bounds the whole transaction, lock wait included.
//
// # Idempotency
//
// With [inventory.WithKey], the key is written to the ledger table in the
// same transaction, so a call that did not take effect never uses up its
// key. A keyed call first reads the stock and the key together without
// locking, so duplicates and refusals (after a sell-out, nearly every call)
// take no lock and join no batch. Those reads take at most half the
// connections of a pool with a limit (sql.DB.SetMaxOpenConns): a keyed call
// that finds them all taken joins its batch unread, which checks its key
// and the stock under the lock. So a crowd of keyed calls never keeps the
// transactions from the pool.
//
// # Orders
//
// The Manager is also an [inventory.OrderManager]. Every call is one
// transaction that locks the rows of its SKUs with FOR UPDATE in SKU
// order (so two calls never deadlock on each other), releases the SKUs'
// holds past their TTL, checks every line and writes them all, or none.
// Holds live in the holds table of [sqlstore.Schema] (one row per line),
// which [sqlstore.Store.CreateTables] creates; their TTL runs on the
// database's clock. An expired hold of a SKU is released by the next call
// that moves the SKU (Reduce, Return, the lines calls, Reserve), by
// Confirm and Cancel of the hold, and by Sweep, which releases up to
// [WithSweepLimit] holds per call (see [inventory.Reap] to run it in the
// background). A move releases the expired lines of its own SKUs; the
// other lines of such a hold stay counted in [Manager.Held] until a move
// of their SKU, Confirm, Cancel or Sweep releases them.
//
// The idempotency key of ReduceLines and ReturnLines is kept in the ledger
// under the empty SKU, apart from the keys of single-SKU calls.
//
// # Movement ledger
//
// With [WithLedger] the Manager keeps a movement ledger (package
// [ledger], docs/ledger.md): each move that takes effect (Init, Reduce,
// Return, the lines calls, each line of Reserve, Confirm, Cancel and the
// release of an expired hold) writes its entries, with the call's
// [inventory.WithRef] reference, in the transaction that moves the stock,
// the caller's included (InTx), with one INSERT per transaction; the
// Manager reads them back as a [ledger.Reader].
//
// # Inside a caller's transaction
//
// [Manager.InTx] binds every call to a transaction of the caller's, so
// that the stock move, its idempotency key and the caller's own rows (the
// order) commit or roll back together. The row locks a call takes are then
// held until the caller commits or rolls back. Each call runs in a
// savepoint: one that returns an error has changed nothing in the
// caller's transaction, which the caller may go on using, except after an
// error wrapping [inventory.ErrContention] (a deadlock or lock timeout,
// after which MySQL has rolled the whole transaction back) or ctx's
// error: then roll back, and retry the whole transaction.
package rowlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/sqlstore"
)

// DefaultLockTimeout is how long a call waits for a row lock unless
// configured otherwise.
const DefaultLockTimeout = 5 * time.Second

// Manager implements [inventory.StockManager] and [inventory.OrderManager]
// with a row lock per transaction, which applies the calls of a SKU that
// arrived together. It is safe for concurrent use. Create it with [New].
// Beside those calls it has InTx (the calls bound to a caller's
// transaction, a [Tx]), CreateTables and Entries ([ledger.Reader]), which
// it shares with the other SQL strategy.
//
// Its Confirm of a hold past its TTL releases it in the same transaction
// and returns [inventory.ErrHoldReleased]. Its Sweep releases up to the
// sweep limit ([WithSweepLimit]) of holds past their TTL, each in a
// transaction of its own, and deletes a batch of hold lines that ended
// more than the key TTL ago; a hold whose SKUs' rows stay locked past the
// lock wait is left for the next Sweep (or the call holding them releases
// it).
type Manager struct {
	face // validates, checks ctx, refuses locally, wraps errors; calls m.move and m.o
	t    *sqlengine.Tables
	o    *sqlengine.Orders

	comb *merge.Keyed[string, struct{}, sqlengine.Step, sqlengine.Outcome] // the calls of each SKU in flight
}

// face is the Manager's [sqlengine.Face], embedded under a name of its own
// so that the field stays unexported. By it the Manager is a
// [ledger.Reader] too.
type face = sqlengine.Face

var _ ledger.Reader = (*Manager)(nil)

type config struct {
	schema sqlstore.Schema
	ttl    time.Duration
	wait   time.Duration
	sweep  int
	ledger bool
	// refusals is WithRefusals's TTL, when refusalsSet
	refusals    time.Duration
	refusalsSet bool
}

// Option configures [New]. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithSchema names the tables and columns; see [sqlstore.Schema]. The
// default is the zero Schema: sqlstore's default names.
func WithSchema(s sqlstore.Schema) Option { return func(c *config) { c.schema = s } }

// WithKeyTTL sets how long an idempotency key is remembered; at least a
// millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithLockTimeout bounds the wait for a row lock, after which a call
// returns [inventory.ErrContention]; it must be positive. See the package
// documentation for how each engine applies it. The default is
// [DefaultLockTimeout].
func WithLockTimeout(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WithRefusals makes the Manager refuse an unkeyed Reduce without a round
// trip when the database refused a Reduce of its SKU less than ttl ago and
// the stock it saw then is less than this Reduce asks: once a flash sale
// is sold out, the buyers' calls are refused in the process. ttl is in
// 1ms..10s. The default is no local refusals.
//
// It never makes a call succeed that the database would refuse: it only
// refuses. Its price is staleness, bounded by ttl: a local refusal says
// that the stock was below the quantity at some moment during the last
// ttl (the error says so, and carries that stock as the remaining value),
// so units added meanwhile by another process or Manager, or by this
// Manager's Cancel, ReturnLines or a hold's expiry, can be refused for up
// to ttl after they were added. This Manager's own Return and Init of the
// SKU end its local refusals at once. Calls with an idempotency key always
// go to the database: one may repeat a call that took effect, which must
// be told ErrDuplicate. Calls inside a caller's transaction (InTx) are
// never refused locally. What is remembered is bounded: a table of 16384
// entries, a later SKU that hashes to an entry taking it over.
func WithRefusals(ttl time.Duration) Option {
	return func(c *config) { c.refusals, c.refusalsSet = ttl, true }
}

// WithSweepLimit sets how many holds one Sweep releases at most, each in
// a transaction of its own; at least 1. The default is 1000.
func WithSweepLimit(n int) Option { return func(c *config) { c.sweep = n } }

// WithLedger makes the Manager keep a movement ledger (package
// [ledger]): every move that takes effect is recorded in the transaction
// that makes it, in the table named after the stock table with
// "_moves" ("stock_moves" for the default table), which [Manager.CreateTables]
// creates; the Manager is then a [ledger.Reader]. A batch of combined
// calls writes its entries with one INSERT. The default keeps none, and
// costs no statement. See docs/ledger.md.
func WithLedger() Option { return func(c *config) { c.ledger = true } }

// New returns a Manager over db. The tables must exist: see
// [sqlstore.Store.CreateTables]. New validates the options and names and
// chooses the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := config{ttl: inventory.DefaultKeyTTL, wait: DefaultLockTimeout, sweep: 1000}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.wait <= 0 {
		return nil, fmt.Errorf("rowlock: %w: lock timeout %v is not positive", inventory.ErrInvalidArgument, c.wait)
	}
	if c.sweep < 1 {
		return nil, fmt.Errorf("rowlock: %w: sweep limit %d < 1", inventory.ErrInvalidArgument, c.sweep)
	}
	m := &Manager{}
	o, f, err := sqlengine.Open(db, sqlengine.Strategy{
		Config:   sqlengine.Config{Pkg: "rowlock", Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl, LockWait: c.wait, Moves: c.ledger},
		Orders:   sqlengine.Orders{Attempts: 3, Base: time.Millisecond, Cap: 20 * time.Millisecond, LockWait: c.wait, SweepLimit: c.sweep},
		Refusals: c.refusals, RefusalsSet: c.refusalsSet,
	}, m.move)
	if err != nil {
		return nil, err
	}
	m.face, m.t, m.o = f, o.T, o
	m.comb = merge.NewKeyed(maxBatch, m.apply)
	return m, nil
}

// Tx is a Manager's calls bound to a caller's transaction; see
// [Manager.InTx]. It is an alias of the type optimistic and rowlock share,
// so its methods are listed here: Init, Get, Reduce, Return
// ([inventory.StockManager]) and ReduceLines, ReturnLines, Reserve,
// Confirm, Cancel, Held, Sweep ([inventory.OrderManager]), each as the
// Manager's but run in a savepoint of tx. Get and Held read what tx sees;
// Sweep releases every hold in tx.
type Tx = sqlengine.Tx

// maxBatch bounds the calls of one SKU that one transaction applies.
const maxBatch = 128

// call is one Reduce or Return queued in Manager.comb, with its answer.
type call = merge.Call[sqlengine.Step, sqlengine.Outcome]

// move is Reduce or Return behind the front: the calls of one SKU in
// flight at once are applied together (see "Combining" in the package
// documentation). A keyed call that lost to one with the same key while
// it waited reports the duplicate it is, with the first remaining.
func (m *Manager) move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if key != "" {
		if rem, err := m.t.Precheck(ctx, sku, qty, dir, key); err != nil {
			return rem, err
		}
	}
	a, err := m.comb.Do(ctx, sku, sqlengine.Step{Qty: qty, Dir: dir, Key: key, Ref: driver.Ref(ctx)})
	if err != nil {
		return 0, m.t.Err(ctx, string(dir), err)
	}
	return a.Remaining, a.Err
}

// apply applies batch, the calls of sku taken together, in one
// transaction (sqlengine.Orders.MoveBatch), run by a goroutine of
// merge.Keyed's: ctx is cancelled once every caller of the batch left.
// A caller whose ctx ended before it started leaves unapplied; a failed
// transaction's error is every call's.
func (m *Manager) apply(ctx context.Context, sku string, _ *struct{}, batch []*call) {
	live := make([]*call, 0, len(batch))
	steps := make([]sqlengine.Step, 0, len(batch))
	for _, c := range batch {
		if err := c.Ctx.Err(); err != nil {
			c.Ans = sqlengine.Outcome{Err: m.t.Err(c.Ctx, string(c.Req.Dir), err)}
			continue
		}
		live, steps = append(live, c), append(steps, c.Req)
	}
	if len(live) == 0 {
		return
	}
	out, err := m.o.MoveBatch(ctx, sku, steps)
	for i, c := range live {
		if err == nil {
			c.Ans = out[i]
			continue
		}
		c.Ans = sqlengine.Outcome{Err: err}
		if cerr := c.Ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			c.Ans.Err = fmt.Errorf("%w: %w", err, cerr)
		}
	}
}
