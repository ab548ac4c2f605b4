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
// # Lock waits
//
// A call waits for the row lock at most until ctx is done or the lock
// timeout ([WithLockTimeout]) passes, then returns an error wrapping
// [inventory.ErrContention], as it does when the engine reports a deadlock,
// a serialization failure or a busy database. Any error rolls the whole
// transaction back: nothing is left half-done.
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
// take no lock.
package rowlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/sqlstore"
)

// DefaultLockTimeout is how long a call waits for a row lock unless
// configured otherwise.
const DefaultLockTimeout = 5 * time.Second

// Manager implements [inventory.StockManager] with a row lock per call. It
// is safe for concurrent use. Create it with [New].
type Manager struct {
	f    front.Front // validates, checks ctx, wraps errors; calls *backend
	t    *sqldialect.Tables
	wait time.Duration

	// afterLock, set by tests before any call, runs while a call holds the
	// row lock, between its lock and its write.
	afterLock func(sku string)
}

var _ inventory.StockManager = (*Manager)(nil)

type config struct {
	schema sqlstore.Schema
	ttl    time.Duration
	wait   time.Duration
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

// New returns a Manager over db. The tables must exist: see
// [sqlstore.Store.CreateTables]. New validates the options and names and
// chooses the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := config{ttl: inventory.DefaultKeyTTL, wait: DefaultLockTimeout}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.wait <= 0 {
		return nil, fmt.Errorf("rowlock: %w: lock timeout %v is not positive", inventory.ErrInvalidArgument, c.wait)
	}
	t, err := sqldialect.New(db, sqldialect.Config{Pkg: "rowlock", Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl, LockWait: c.wait})
	if err != nil {
		return nil, err
	}
	m := &Manager{t: t, wait: c.wait}
	m.f = front.New("rowlock", (*backend)(m))
	return m, nil
}

// Init implements [inventory.StockManager].
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	return m.f.Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager].
func (m *Manager) Get(ctx context.Context, sku string) (int64, error) {
	return m.f.Get(ctx, sku)
}

// Reduce implements [inventory.StockManager].
func (m *Manager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.f.Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (m *Manager) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.f.Return(ctx, sku, qty, opts...)
}

// backend is the Manager seen by its front.
type backend Manager

// Init implements [front.Backend].
func (b *backend) Init(ctx context.Context, sku string, qty int64) error {
	return b.t.Init(ctx, sku, qty)
}

// Get implements [front.Backend].
func (b *backend) Get(ctx context.Context, sku string) (int64, error) {
	return b.t.Get(ctx, sku)
}

// Move implements [front.Backend].
func (b *backend) Move(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error) {
	return (*Manager)(b).move(ctx, sku, qty, dir, key)
}

func (m *Manager) move(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error) {
	if key != "" {
		cur, rem, found, err := m.t.Peek(ctx, sku, dir, key)
		switch {
		case err != nil:
			return 0, err
		case found:
			return rem, m.t.Duplicate(sku, dir, key)
		}
		if err := check(sku, dir, cur, qty); err != nil {
			return cur, err
		}
	}

	rem, err := m.locked(ctx, sku, qty, dir, key)
	if key != "" && (errors.Is(err, inventory.ErrDuplicate) || errors.Is(err, inventory.ErrInsufficientStock)) {
		// A call with the same key committed while this one waited for the
		// lock: report it as the duplicate it is, with its remaining.
		if first, found, serr := m.t.Seen(ctx, m.t.DB, sku, dir, key); serr == nil && found {
			return first, m.t.Duplicate(sku, dir, key)
		}
	}
	return rem, err
}

// locked runs the locking transaction. On a refusal rem is the stock seen.
func (m *Manager) locked(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (rem int64, err error) {
	txCtx, lockCtx := ctx, ctx
	var cancel context.CancelFunc
	if m.t.Engine == sqldialect.SQLite {
		txCtx, cancel = context.WithTimeout(ctx, m.wait)
		lockCtx = txCtx
	} else {
		// The server ends the wait after lockBound; this is the backstop
		// for a server that ignores the setting (MySQL has no FOR UPDATE
		// WAIT): the driver abandons the statement and its connection.
		lockCtx, cancel = context.WithTimeout(ctx, 2*m.lockBound())
	}
	defer cancel()
	var gaveUp bool // the lock wait, not ctx, ended the transaction
	err = m.t.Tx(txCtx, func(tx *sqlx.Tx) error {
		cur, version, err := m.t.Lock(lockCtx, tx, sku)
		if err != nil {
			gaveUp = lockCtx.Err() != nil
			return err
		}
		if m.afterLock != nil {
			m.afterLock(sku)
		}
		if err := check(sku, dir, cur, qty); err != nil {
			rem = cur
			return err
		}
		rem = cur - qty
		if dir == inventory.DirReturn {
			rem = cur + qty
		}
		ok, err := m.t.Set(txCtx, tx, sku, version, rem)
		if err == nil && !ok { // cannot happen under the lock; never write blind
			err = fmt.Errorf("rowlock: %q: %w: row changed under its lock", sku, inventory.ErrContention)
		}
		if err == nil && key != "" {
			var dup bool
			if dup, err = m.t.Record(txCtx, tx, sku, dir, key, rem); err == nil && dup {
				err = m.t.Duplicate(sku, dir, key)
			}
		}
		return err
	})
	switch {
	case err == nil:
		if key != "" {
			m.t.Tidy(ctx, 1)
		}
		return rem, nil
	case ctx.Err() == nil && (gaveUp || txCtx.Err() != nil) && !errors.Is(err, inventory.ErrContention):
		return 0, fmt.Errorf("rowlock: %s %q: %w: no lock within %v: %w", dir, sku, inventory.ErrContention, m.wait, err)
	case errors.Is(err, inventory.ErrInsufficientStock), errors.Is(err, inventory.ErrInvalidArgument):
		return rem, err
	}
	return 0, err
}

// lockBound is how long the server lets a lock wait last: the lock
// timeout, rounded up to whole seconds on MariaDB.
func (m *Manager) lockBound() time.Duration {
	if m.t.Engine == sqldialect.MySQL {
		return (m.wait + time.Second - 1).Truncate(time.Second)
	}
	return m.wait
}

// check reports why moving qty units of sku in direction dir from a stock
// of cur is refused, or nil.
func check(sku string, dir inventory.Direction, cur, qty int64) error {
	if dir == inventory.DirReturn {
		return inventory.CheckReturn(cur, qty)
	}
	if cur < qty {
		return fmt.Errorf("rowlock: %w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, cur, qty)
	}
	return nil
}
