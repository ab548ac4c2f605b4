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
	locker      Locker
	store       Store
	maxAttempts int

	beforeWrite func(sku string) // test hook: runs between the checks and the write
}

var _ inventory.StockManager = (*Manager)(nil)

// Option configures a Manager.
type Option func(*Manager)

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its conditional write finds the stock moved (its lock had lapsed), before
// it gives up with inventory.ErrContention. Values below 1 mean 1. The
// default is [DefaultMaxAttempts].
func WithMaxAttempts(n int) Option {
	return func(m *Manager) { m.maxAttempts = max(n, 1) }
}

// New returns a Manager that locks with l and keeps stock in s.
func New(l Locker, s Store, opts ...Option) *Manager {
	m := &Manager{locker: l, store: s, maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Init implements [inventory.StockManager]. It goes straight to the store.
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return err
	}
	return m.store.Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager]. It goes straight to the store.
func (m *Manager) Get(ctx context.Context, sku string) (int64, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, err
	}
	return m.store.Get(ctx, sku)
}

// Reduce implements [inventory.StockManager].
func (m *Manager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, inventory.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (m *Manager) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, inventory.DirReturn, opts)
}

func (m *Manager) move(ctx context.Context, sku string, qty int64, dir inventory.Direction, opts []inventory.Option) (int64, error) {
	o, err := inventory.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, err
	}
	for range m.maxAttempts {
		rem, done, err := m.attempt(ctx, sku, qty, dir, o.Key)
		if done {
			return rem, err
		}
	}
	return 0, fmt.Errorf("%w: %s %q: the stock moved under the lock %d times", inventory.ErrContention, dir, sku, m.maxAttempts)
}

// attempt locks sku, reads, checks and writes conditionally. done is false
// when the write found the stock moved (the lock had lapsed): nothing
// changed and the caller may try again.
func (m *Manager) attempt(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (rem int64, done bool, err error) {
	lease, err := m.locker.Acquire(ctx, sku)
	if err != nil {
		return 0, true, fmt.Errorf("%s %q: lock: %w", dir, sku, err)
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
			return r, true, duplicate(err, dir, sku, key)
		}
	}
	cur, version, err := m.store.Read(ctx, sku)
	if err != nil {
		return 0, true, err
	}
	next := cur + qty
	if dir == inventory.DirReduce {
		if cur < qty {
			return cur, true, fmt.Errorf("%w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, cur, qty)
		}
		next = cur - qty
	} else if err := inventory.CheckReturn(cur, qty); err != nil {
		return cur, true, err
	}

	select {
	case <-lease.Lost():
		return 0, true, fmt.Errorf("%w: %s %q: lock lost before the write", inventory.ErrContention, dir, sku)
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
		return r, true, duplicate(serr, dir, sku, key)
	case err != nil:
		return 0, true, err
	case !ok:
		return 0, false, nil
	}
	return next, true, nil
}

// duplicate is the error of a Seen that found an entry, or failed with err.
func duplicate(err error, dir inventory.Direction, sku, key string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %s %q with key %q", inventory.ErrDuplicate, dir, sku, key)
}
