// Package lockmgr is the generic lock manager behind the lock strategies
// (redislock, redlock, zklock): lock the SKU, read, check, write, unlock.
//
// The write is a compare-and-set on what was read (a version or the stock
// value itself), so a lock that lapses while its holder is paused (a GC
// pause, a network stall) ends in a clean retry or [inventory.ErrContention],
// never in an oversell. The strategies differ only in their [Locker]; where
// the stock lives is the [Store] chosen at construction.
package lockmgr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/front"
)

// Store keeps stock rows and the idempotency ledger. redisstore.Store and
// sqlstore.Store implement it.
type Store interface {
	// Init sets the stock of sku to qty, creating the SKU if absent.
	Init(ctx context.Context, sku string, qty int64) error

	// Get returns the stock of sku; the error wraps inventory.ErrNotFound
	// when sku is unknown.
	Get(ctx context.Context, sku string) (int64, error)

	// Read returns the committed stock of sku and its version; the error
	// wraps inventory.ErrNotFound when sku is unknown.
	Read(ctx context.Context, sku string) (stock, version int64, err error)

	// Seen reports the remaining stock recorded for an unexpired ledger
	// entry (sku, dir, key).
	Seen(ctx context.Context, sku string, dir inventory.Direction, key string) (remaining int64, found bool, err error)

	// CompareAndSet sets the stock of sku to newStock if its version is
	// still version and, when key != "", records (sku, dir, key) ->
	// newStock in the ledger, all in one atomic step. ok is false when the
	// version moved; nothing was written. When the key is already recorded
	// nothing is written and the error wraps inventory.ErrDuplicate.
	CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir inventory.Direction, key string) (ok bool, err error)
}

// Locker takes a mutual-exclusion lock per name.
type Locker interface {
	// Acquire blocks until the lock on name is held, ctx is done (the error
	// wraps ctx.Err()) or the Locker gave up (the error wraps
	// inventory.ErrContention). name is a SKU, verbatim: any valid SKU
	// bytes; each Locker encodes it safely for its own keyspace.
	Acquire(ctx context.Context, name string) (Lease, error)
}

// Lease is a held lock.
type Lease interface {
	// Lost is closed once the lock may no longer be held: renewal failed or
	// the session expired.
	Lost() <-chan struct{}

	// Release stops renewal and frees the lock. It is called exactly once.
	Release(ctx context.Context) error
}

// DefaultMaxAttempts is how many times a Manager locks, reads and writes
// before it gives up with inventory.ErrContention, unless configured
// otherwise.
const DefaultMaxAttempts = 3

// releaseTimeout bounds a Release, which runs even once the caller's ctx is
// done (the caller no longer waits for it then): a lock left behind would
// block other buyers until it expires.
const releaseTimeout = 5 * time.Second

// Manager is an [inventory.StockManager] that moves stock under a lock with
// a conditional write. It is safe for concurrent use.
type Manager struct {
	f           front.Front // validates, checks ctx, wraps errors; calls *backend
	locker      Locker
	store       Store
	maxAttempts int

	beforeWrite func(sku string) // test hook: runs between the checks and the write
}

var _ inventory.StockManager = (*Manager)(nil)

type config struct {
	name        string
	maxAttempts int
}

// Option configures a Manager. A nil Option is ignored.
type Option func(*config)

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its conditional write finds the stock moved (its lock had lapsed), before
// it gives up with inventory.ErrContention. The default is
// [DefaultMaxAttempts]. New has no error to return, so it treats values
// below 1 as 1; the lock packages refuse them (see [inventory] "Options").
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = max(n, 1) }
}

// WithName sets the name that prefixes the Manager's errors, as in
// `redislock: reduce "sku": ...`. The default is "lockmgr".
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// New returns a Manager that locks with l and keeps stock in s.
func New(l Locker, s Store, opts ...Option) *Manager {
	c := config{name: "lockmgr", maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	m := &Manager{locker: l, store: s, maxAttempts: c.maxAttempts}
	m.f = front.New(c.name, (*backend)(m))
	return m
}

// Init implements [inventory.StockManager]. It goes straight to the store.
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	return m.f.Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager]. It goes straight to the store.
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
	return b.store.Init(ctx, sku, qty)
}

// Get implements [front.Backend].
func (b *backend) Get(ctx context.Context, sku string) (int64, error) {
	return b.store.Get(ctx, sku)
}

// Move implements [front.Backend]: it tries up to maxAttempts times.
func (b *backend) Move(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error) {
	m := (*Manager)(b)
	for range m.maxAttempts {
		rem, done, err := m.attempt(ctx, sku, qty, dir, key)
		if done {
			return rem, err
		}
	}
	return 0, fmt.Errorf("%w: the stock moved under the lock %d times", inventory.ErrContention, m.maxAttempts)
}

// attempt locks sku, reads, checks and writes conditionally. done is false
// when the write found the stock moved (the lock had lapsed): nothing
// changed and the caller may try again.
func (m *Manager) attempt(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (rem int64, done bool, err error) {
	lease, err := m.locker.Acquire(ctx, sku)
	if err != nil {
		return 0, true, fmt.Errorf("lock: %w", err)
	}
	defer func() {
		// The outcome stands whatever Release says: a lock it failed to
		// free expires on its own. Release runs even once ctx is done, but
		// the caller waits for it only while ctx lives: a stalled network
		// must not hold a call past its deadline.
		done := make(chan struct{})
		go func() {
			defer close(done)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			defer cancel()
			_ = lease.Release(rctx)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}()

	if key != "" {
		if r, found, err := m.store.Seen(ctx, sku, dir, key); err != nil || found {
			return r, true, duplicate(err, key)
		}
	}
	cur, version, err := m.store.Read(ctx, sku)
	if err != nil {
		return 0, true, err
	}
	next := cur + qty
	if dir == inventory.DirReduce {
		if cur < qty {
			return cur, true, fmt.Errorf("%w: has %d, asked %d", inventory.ErrInsufficientStock, cur, qty)
		}
		next = cur - qty
	} else if err := inventory.CheckReturn(cur, qty); err != nil {
		return cur, true, err
	}

	select {
	case <-lease.Lost():
		return 0, true, fmt.Errorf("%w: lock lost before the write", inventory.ErrContention)
	default:
	}
	if m.beforeWrite != nil {
		m.beforeWrite(sku)
	}
	ok, err := m.store.CompareAndSet(ctx, sku, version, next, dir, key)
	switch {
	case errors.Is(err, inventory.ErrDuplicate):
		// The lock lapsed and another holder recorded the key: report
		// what that call returned.
		r, found, serr := m.store.Seen(ctx, sku, dir, key)
		if serr == nil && !found { // and the entry expired since: start over
			return 0, false, nil
		}
		return r, true, duplicate(serr, key)
	case err != nil:
		return 0, true, err
	case !ok:
		return 0, false, nil
	}
	return next, true, nil
}

// duplicate is the error of a Seen that found an entry, or failed with err.
func duplicate(err error, key string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
}
