// Package optimistic is an [inventory.StockManager] over a SQL row (sku,
// stock, version), made safe by optimistic concurrency control instead of
// locks held across round trips. It runs on MariaDB/MySQL, PostgreSQL and
// SQLite through [github.com/jmoiron/sqlx], on the tables of
// [github.com/stockkit/inventory/sqlstore], which the rowlock strategy and
// the lock strategies' SQL store share.
//
// # Combined conditional writes (the default)
//
// The textbook optimistic write reads (stock, version), checks, and writes
// back with
//
//	UPDATE stock SET stock = ?, version = version + 1 WHERE sku = ? AND version = ?
//
// which collapses on a hot row: with 64 goroutines on one SKU almost every
// write loses the race. So calls of one Manager on one SKU combine: while
// one batch of the SKU is being written, the calls that arrive queue up,
// and the next batch takes them all, in order, at once. Each call still
// gets its own result (its own remaining value, or ErrInsufficientStock,
// ErrDuplicate...), as if the calls had run one by one in that order.
//
// A batch is first tried as one conditional UPDATE of its net change (the
// single-statement UPDATE below, in a transaction with the ledger rows
// when keyed), whose range lets it match only if every call of the batch,
// Reduces and Returns mixed, fits after the ones before it. It reads no
// version, so the writes of other processes do not make it fail (the row
// lock makes them take turns), and a lone call is one round trip. Each
// call's remaining is counted from the stock it returns. On SQLite, whose
// writers take turns on the database's one write lock and pay one fsync per
// commit, the UPDATEs of unkeyed batches of different SKUs that are ready
// together run in one transaction, one commit for all (an error fails them
// all, and nothing of them is written).
//
// When that UPDATE matches no row (a call does not fit, the SKU is unknown,
// expired holds are due for release, a key is in the ledger already), or a
// key repeats in the batch, the batch reads the row (fresh autocommit
// statements, never a stale REPEATABLE READ snapshot), the ledger rows of
// its keys and the SKU's expired holds, works out every call's outcome in
// order, and writes them with one UPDATE of the net change conditional on
// the stock still lying in the range where every one of those outcomes
// holds (in one transaction with the ledger rows and the holds it
// releases). A writer of another process that moved the row in between
// makes that write fail only if it moved the stock out of that range; the
// batch then reads again after a decorrelated-jitter backoff, and the last
// of [WithMaxAttempts] attempts reads and writes in one transaction that
// locks the row first, which no other writer can make fail. After a read
// that refused a call for want of stock, the SKU's next batch reads first.
//
// # Single statement
//
// [WithSingleStatement] replaces the read and CAS by one conditional UPDATE,
//
//	UPDATE stock SET stock = stock - ?, version = version + 1 WHERE sku = ? AND stock >= ?
//
// returning the new stock in the same statement (RETURNING; on MySQL,
// LAST_INSERT_ID(expr)). When it matches no row a fresh read tells an unknown
// SKU from insufficient stock; if that read shows the stock has meanwhile
// become sufficient, the UPDATE is tried again, so the reported cause is
// always one the row really had.
//
// # Idempotency
//
// With [inventory.WithKey], the key is written to the ledger table in the
// same transaction as the stock, so a call that did not take effect never
// uses up its key. Keys expire after [WithKeyTTL].
//
// # Orders
//
// The Manager is also an [inventory.OrderManager]. ReduceLines,
// ReturnLines and Reserve read the rows of their SKUs in one statement,
// check every line, and write them in one transaction with one
// conditional UPDATE per line, in SKU order (stock = stock - n WHERE
// stock >= n, with the units of the expired holds it releases); an UPDATE
// that no longer matches rolls the transaction back and the call reads
// again, up to [WithMaxAttempts] times with [WithBackoff]. A refusal
// writes nothing and opens no transaction. On SQLite, where writers take
// turns on the database's one write lock anyway, the lines calls take that
// lock first and read under it, as rowlock's do. Confirm, Cancel and Sweep lock the rows of the hold's
// SKUs (FOR UPDATE) for their short transaction, as they must see the
// hold's lines as they are. Holds live in the holds table of
// [sqlstore.Schema] (one row per line), which
// [sqlstore.Store.CreateTables] creates; their TTL runs on the database's
// clock.
//
// An expired hold of a SKU is released by the next call that moves the
// SKU, in the same transaction: single calls read, with the stock, whether
// the SKU has lines held past their TTL, and only then write them released
// along with the conditional write (the first UPDATE of a batch, and in
// single-statement mode every UPDATE, matches no row while such lines
// exist, and the call takes the read path). Confirm and Cancel of the hold release it too, and
// Sweep releases up to [WithSweepLimit] holds per call (see
// [inventory.Reap]). A move releases the expired lines of its own SKUs;
// the other lines of such a hold stay counted in [Manager.Held] until a
// move of their SKU, Confirm, Cancel or Sweep releases them.
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
// order) commit or roll back together. There a call, with no combining,
// reads through the caller's transaction and writes each row once with a
// conditional UPDATE: if that finds the row moved so that the call no
// longer fits (another writer took the stock after the caller's
// transaction read it), or the database refuses it as a serialization
// failure, the call returns an error wrapping [inventory.ErrContention];
// the caller rolls back and retries the whole transaction. Each call runs in a savepoint: one that returns any
// other error has changed nothing in the caller's transaction, which the
// caller may go on using. The rows a call writes stay locked until the
// caller's transaction ends.
package optimistic

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/sqlstore"
)

// Manager implements [inventory.StockManager] and [inventory.OrderManager]
// with optimistic concurrency over SQL. It is safe for concurrent use. Create it with [New].
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
	cfg  config

	comb  *merge.Keyed[string, bool, req, ans] // the calls of each SKU in flight (combine.go)
	moves *merge.Queue[move, moved]            // SQLite: the direct UPDATEs of several SKUs in one transaction; nil elsewhere

	// writes tried after a read, and those that lost; moves run in a
	// transaction with others (SQLite); for tests
	writes, conflicts, together atomic.Int64

	// beforeCAS, set by tests before any call, runs before each write of a
	// batch: between an attempt's reads and its write, or before the
	// conditional UPDATE of the direct path.
	beforeCAS func(sku string)
	// casOnly, set by tests, makes every batch take the read path.
	casOnly bool
}

// face is the Manager's [sqlengine.Face], embedded under a name of its own
// so that the field stays unexported. By it the Manager is a
// [ledger.Reader] too.
type face = sqlengine.Face

var _ ledger.Reader = (*Manager)(nil)

type config struct {
	schema    sqlstore.Schema
	ttl       time.Duration
	attempts  int
	single    bool
	base, cap time.Duration
	maxBatch  int
	sweep     int
	ledger    bool
	// refusals is WithRefusals's TTL, when refusalsSet
	refusals    time.Duration
	refusalsSet bool
}

// Option configures [New]. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// LockWait bounds the wait of a batch's last attempt, which locks the row
// (see [WithMaxAttempts]): past it the batch's calls fail with
// [inventory.ErrContention]. The server applies it where it can, as
// rowlock's lock timeout (PostgreSQL's lock_timeout; MariaDB's FOR UPDATE
// WAIT, in whole seconds); MySQL keeps its innodb_lock_wait_timeout, and
// SQLite its busy_timeout. The caller's ctx bounds it too.
const LockWait = 5 * time.Second

// WithSchema names the tables and columns; see [sqlstore.Schema]. The
// default is the zero Schema: sqlstore's default names.
func WithSchema(s sqlstore.Schema) Option { return func(c *config) { c.schema = s } }

// WithKeyTTL sets how long an idempotency key is remembered; at least a
// millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithMaxAttempts sets how many times a call tries its write before giving
// up with [inventory.ErrContention]; at least 1. With two or more, the last
// attempt locks the row for its read and write and cannot lose, so a call
// then gives up only if that lock wait fails: after [LockWait], or at the
// server's deadlock detection. In single-statement mode it bounds the
// retries of an UPDATE that found the row changed under it. The default is
// 10.
func WithMaxAttempts(n int) Option { return func(c *config) { c.attempts = n } }

// WithBackoff sets the bounds of the decorrelated-jitter backoff between
// the attempts of a batch whose write lost: each pause is drawn from base up to three times
// the previous one, capped at max. base must be positive and max at least
// base. The default is 1ms to 100ms.
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) { c.base, c.cap = base, max }
}

// WithSingleStatement makes each call one conditional UPDATE of its own (a
// transaction with the ledger row when keyed), with no combining. The
// default combines the calls of a SKU.
func WithSingleStatement() Option { return func(c *config) { c.single = true } }

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
// calls writes its entries with one INSERT, its unkeyed calls with no
// reference as one row; a batch that needed no transaction (unkeyed
// calls) writes its UPDATE and its entries in one round trip on
// PostgreSQL and MariaDB (one statement), in a transaction elsewhere. The
// default keeps none, and costs no statement. See docs/ledger.md.
func WithLedger() Option { return func(c *config) { c.ledger = true } }

// New returns a Manager over db. The tables must exist: see
// [sqlstore.Store.CreateTables]. New validates the options and names and
// chooses the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := config{ttl: inventory.DefaultKeyTTL, attempts: 10, base: time.Millisecond, cap: 100 * time.Millisecond, maxBatch: 128, sweep: 1000}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.attempts < 1 {
		return nil, fmt.Errorf("optimistic: %w: max attempts %d < 1", inventory.ErrInvalidArgument, c.attempts)
	}
	if c.base <= 0 || c.cap < c.base {
		return nil, fmt.Errorf("optimistic: %w: backoff %v..%v", inventory.ErrInvalidArgument, c.base, c.cap)
	}
	if c.sweep < 1 {
		return nil, fmt.Errorf("optimistic: %w: sweep limit %d < 1", inventory.ErrInvalidArgument, c.sweep)
	}
	// SQLite's writers take turns on one lock: a read before the write is
	// only more work there, so the lines calls lock as rowlock's do (Open
	// clears CAS there).
	m := &Manager{cfg: c}
	o, f, err := sqlengine.Open(db, sqlengine.Strategy{
		Config:   sqlengine.Config{Pkg: "optimistic", Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl, LockWait: LockWait, Moves: c.ledger},
		Orders:   sqlengine.Orders{CAS: true, Attempts: c.attempts, Base: c.base, Cap: c.cap, SweepLimit: c.sweep},
		Refusals: c.refusals, RefusalsSet: c.refusalsSet,
	}, m.move)
	if err != nil {
		return nil, err
	}
	m.face, m.t, m.o = f, o.T, o
	m.comb = merge.NewKeyed(c.maxBatch, m.apply)
	if m.t.Engine == sqldialect.SQLite {
		m.moves = merge.New(1, c.maxBatch, nil, m.moveOne, m.moveAll)
	}
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

// move is Reduce or Return behind the front.
func (m *Manager) move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if m.cfg.single {
		return m.single(ctx, sku, qty, dir, key)
	}
	return m.combine(ctx, sku, req{qty: qty, dir: dir, key: key, ref: driver.Ref(ctx)})
}

// bounds gives the conditional UPDATE's arguments for moving qty units in
// dir: the signed change, and the range the stock must be in before it.
func bounds(dir driver.Direction, qty int64) (delta, lo, hi int64) {
	if dir == driver.DirReturn {
		return qty, 0, inventory.MaxStock - qty
	}
	return -qty, qty, inventory.MaxStock
}

// single is the single-statement mode.
func (m *Manager) single(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	delta, lo, hi := bounds(dir, qty)
	if key != "" {
		if rem, err := m.t.Precheck(ctx, sku, qty, dir, key); err != nil {
			return rem, err
		}
	}
	for attempt := 1; ; attempt++ {
		rem, ok, err := m.update(ctx, sku, delta, lo, hi, dir, key)
		if errors.Is(err, inventory.ErrDuplicate) {
			if rem, found, err := m.seen(ctx, sku, dir, key); found || err != nil {
				return rem, err // with the first call's remaining
			}
			return 0, err
		}
		if err != nil || ok {
			return rem, err
		}
		if rem, done, err := m.missed(ctx, sku, qty, dir, key); done {
			return rem, err
		}
		if attempt >= m.cfg.attempts {
			return 0, &front.Error{Strategy: "optimistic", Op: string(dir), Subject: sku, Err: fmt.Errorf("%w after %d attempts", inventory.ErrContention, attempt)}
		}
		// The stock changed back between the UPDATE and the read: again.
	}
}

// seen reports a keyed call that took effect, with ErrDuplicate and its
// remaining.
func (m *Manager) seen(ctx context.Context, sku string, dir driver.Direction, key string) (int64, bool, error) {
	if key == "" {
		return 0, false, nil
	}
	rem, found, err := m.t.Seen(ctx, m.t.DB, sku, dir, key)
	if err == nil && found {
		err = m.t.Duplicate(sku, dir, key)
	}
	return rem, found, err
}

// missed finds out, from a fresh read, why the single statement matched no
// row: done=true with the call's answer (a duplicate, an unknown SKU, a
// refusal, or the move made with the release of the SKU's expired holds);
// done=false when the stock lets the call through after all.
func (m *Manager) missed(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (rem int64, done bool, err error) {
	// A call with the same key may have just taken the stock.
	if rem, found, err := m.seen(ctx, sku, dir, key); err != nil || found {
		return rem, true, err
	}
	rs, err := m.t.ReadHolds(ctx, m.t.DB, []string{sku})
	if err != nil {
		return 0, true, err
	}
	r, ok := rs[sku]
	switch {
	case !ok:
		return 0, true, m.t.NotFound(sku)
	case r.Expired:
		// Expired holds to release first: the lines call does both.
		rem, err := m.o.Move(ctx, nil, sku, qty, dir, key)
		return rem, true, err
	}
	if err := m.t.Check(sku, dir, r.Stock, qty); err != nil {
		return r.Stock, true, err
	}
	return 0, false, nil
}

// update runs the conditional UPDATE, with the ledger row in the same
// transaction when keyed, and the movement ledger's entry with a ledger.
// ok=false: no row matched, nothing changed.
func (m *Manager) update(ctx context.Context, sku string, delta, lo, hi int64, dir driver.Direction, key string) (rem int64, ok bool, err error) {
	switch {
	case key == "" && !m.cfg.ledger:
		return m.t.Move(ctx, m.t.DB, sku, delta, lo, hi)
	case key == "": // with a ledger: in one round trip where the engine can
		return m.t.MoveLogged(ctx, sku, delta, lo, hi, []sqlengine.Move{{SKU: sku, Kind: sqlengine.KindOf(dir),
			Units: max(delta, -delta), Available: delta, Ref: driver.Ref(ctx)}})
	}
	err = m.t.Tx(ctx, func(tx *sqlx.Tx) error {
		if rem, ok, err = m.t.Move(ctx, tx, sku, delta, lo, hi); err != nil || !ok {
			return err
		}
		if key != "" {
			if err := m.t.Record(ctx, tx, sku, dir, key, rem); err != nil {
				return err
			}
		}
		return m.t.WriteMoves(ctx, tx, []sqlengine.Move{{SKU: sku, Kind: sqlengine.KindOf(dir), Units: max(delta, -delta),
			Available: rem, Key: key, Ref: driver.Ref(ctx)}})
	})
	if err != nil {
		return 0, false, err
	}
	if ok && key != "" {
		m.t.Tidy(ctx, 1)
	}
	return rem, ok, nil
}

// sleep pauses for d or until ctx is done; it reports whether it slept.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
