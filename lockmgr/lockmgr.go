// Package lockmgr is the generic lock manager behind the lock strategies
// (redislock, redlock, zklock, sqllock): lock the SKU, read, check, write,
// unlock.
//
// The write is a compare-and-set on what was read (a version or the stock
// value itself), so a lock that lapses while its holder is paused (a GC
// pause, a network stall) ends in a clean retry or [inventory.ErrContention],
// never in an oversell. The strategies differ only in their [Locker]; where
// the stock lives is the [Store] chosen at construction.
//
// # Writing a lock or a store
//
// The two interfaces below are the plug-in seams. A third party that writes
// a new [Locker] (for a lock service this module does not know) or a new
// [Store] (for a database it does not know) gets a complete
// [inventory.StockManager] from [NewManager], with validation, idempotency keys,
// retries and the error contract of package inventory done here:
//
//	m, err := lockmgr.NewManager(myLocker, sqlstoreOrMyStore)
//	var _ inventory.StockManager = m
//
// Each method's doc says what it must return in which case, as a driver
// contract. The public suites in package
// [github.com/stockkit/inventory/lockmgr/lockmgrtest] check them:
// RunLocker (exclusion across Lockers, a lapse reported, a lapsed lease's
// Release refused, ctx honoured, byte-exact names) and RunStore (versions,
// the atomic ledger, duplicates, byte-exact SKUs, MaxStock, ctx).
// Run inventorytest.Run over the resulting Manager too.
//
// A Store that is also a [HoldStore] (hold lines beside the stock, and
// order records; lockmgrtest.RunHoldStore checks it) makes the Manager an
// [inventory.OrderManager] too: see Orders below for how the multi-SKU
// calls and holds are built from per-SKU steps. Over a plain Store the
// order calls fail with an error wrapping errors.ErrUnsupported.
//
// A Store that is a [LedgerStore] keeping a movement ledger (package
// ledger) makes the Manager a ledger.Reader: the Store writes each entry
// with the write it records, as the [Note] in the write's ctx says.
//
// The Manager calls a Store only with valid SKUs (1..255 bytes of UTF-8,
// no control characters), quantities already checked against 0..MaxStock,
// and keys valid as SKUs are (1..MaxSKULen bytes), or "" for no key: a Store
// need not validate again.
//
// # Orders
//
// Over a [HoldStore], a Manager is an [inventory.OrderManager]. Its lines
// may live on different shards (Redis Cluster slots, or simply SKUs behind
// different locks), so no call moves two SKUs in one step:
//
//   - Reserve records the order (CreateOrder), then holds its lines one at
//     a time, each under its SKU's lock with a compare-and-set (Hold), in
//     the order of the call. When a line is refused it gives back the
//     lines it took (Unhold) and deletes the record (StepAbort). Once every
//     line is held it marks the order complete: only then does the hold
//     exist for Confirm and Cancel (before, they report
//     inventory.ErrHoldNotFound), and only then is a repeat of Reserve
//     with its id inventory.ErrDuplicate (before, inventory.ErrContention:
//     the earlier Reserve is still holding its lines, or giving them back
//     after its ctx ended).
//   - Confirm and Cancel decide in one compare-and-set step on the order
//     record, which is also where the expiry is decided: of a Confirm, a
//     Cancel and the expiry exactly one wins. Then they settle (sold) or
//     give back the lines and mark the order done.
//   - ReduceLines is a Reserve followed by a Confirm, under an order of its
//     own (kept, with WithKey, to refuse repeats).
//   - ReturnLines checks every line, then writes them one by one, each
//     under its SKU's lock with an entry of its own in the ledger; once
//     one is written it finishes the others (a return cannot be refused
//     once checked, but a sale can take the units it gave back).
//
// An order call whose error says that nothing changed (ErrContention, a
// refusal, ErrNotFound, ErrDuplicate) gave back whatever it had held
// before it returned. When it could not, or when the call took effect and
// its bookkeeping failed (a Confirm that won, then could not settle its
// lines), the error wraps none of those sentinels, only the backend's
// errors and ctx.Err(), and says what is left: a repeat of the call with
// the same hold id or key finishes it. A HoldStore error that wraps
// ErrContention means the store wrote nothing (a busy database, a
// deadlock): the Manager asks again, a few times for a step that decides
// an order, until ctx ends for the bookkeeping of one that is decided.
//
// A crash midway leaves an incomplete order and some held lines: the
// units are out of the available stock (never sold twice, never lost) and
// come back once the order is abandoned, the abandon grace
// ([AbandonGrace] unless configured) after it was recorded, whatever the
// hold's TTL: through Sweep, or through a retry of the call with the same
// hold id or key, which gives the order up and then takes effect itself
// (until then it answers ErrContention); at the latest, after the hold's
// TTL, through the lazy release below. The final effect of the cut call
// is then none.
//
// Expired holds of a SKU are released lazily, under the SKU's lock, by
// every later call that moves it (Reduce, Return, the lines calls,
// Reserve): ReadHolds names up to 8 expired lines, each order's record
// decides (StepExpire) and the line is given back (or, when its order won
// the race as confirmed, settled). Sweep releases the rest, on every SKU,
// up to [SweepLimit] orders per call.
package lockmgr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
)

// Store keeps stock rows and the idempotency ledger. redisstore.Store and
// sqlstore.Store implement it. A Store is used by many goroutines at once,
// and by other processes on the same backend: every method must be safe
// for concurrent use, and every guarantee below must hold across processes.
//
// Every method honours ctx: once ctx is done it returns an error wrapping
// ctx.Err() (or the driver's timeout) within [inventory.DeadlineSlack] of
// the deadline, even if the backend hangs. A method that returns an error
// other than those named below must have written nothing, unless the
// outcome is unknown (the backend may have applied a write whose reply was
// lost); the Manager then reports the error and the caller's retry with the
// same idempotency key settles it through the ledger. SKUs compare byte by
// byte: no case folding, no trailing-space padding, no Unicode
// normalisation (mind SQL collations).
type Store interface {
	// Init sets the stock of sku to qty, creating the SKU if absent, and
	// moves its version on as any write does (see Read), so that a
	// compare-and-set of an earlier Read fails unless it would write over
	// the same value. It leaves the ledger as it is. It returns only
	// backend errors.
	Init(ctx context.Context, sku string, qty int64) error

	// Get returns the committed stock of sku. It must return an error
	// wrapping inventory.ErrNotFound, and no other sentinel, when sku was
	// never initialised.
	Get(ctx context.Context, sku string) (int64, error)

	// Read returns the committed stock of sku and a version for
	// CompareAndSet. The version must change whenever the stock changes
	// (a counter, or the stock value itself where the write is a
	// compare-and-set on the value: then equal stock may repeat a version,
	// which is safe because the write's outcome is the same). It must
	// return an error wrapping inventory.ErrNotFound when sku was never
	// initialised.
	Read(ctx context.Context, sku string) (stock, version int64, err error)

	// Seen reports the remaining stock recorded in the ledger for an
	// unexpired entry (sku, dir, key): found is false, with a nil error,
	// when there is none. Entries of another SKU, direction or key (byte by
	// byte) are not this one.
	Seen(ctx context.Context, sku string, dir driver.Direction, key string) (remaining int64, found bool, err error)

	// CompareAndSet sets the stock of sku to newStock if its version is
	// still version and, when key != "", records (sku, dir, key) ->
	// newStock in the ledger, all in one atomic step: no reader, in this
	// process or another, may see the stock written without the ledger
	// entry or the reverse. It returns:
	//   - ok true, nil: both were written.
	//   - ok false, nil: the version moved; nothing was written.
	//   - an error wrapping inventory.ErrDuplicate when key != "" and
	//     (sku, dir, key) is already recorded; nothing was written. Of
	//     concurrent calls with the same key, at most one may succeed.
	//   - any other error: a backend failure; nothing was written, or the
	//     outcome is unknown (see the type's doc).
	// Of concurrent calls with the same version, at most one may succeed.
	CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (ok bool, err error)
}

// Locker takes a mutual-exclusion lock per name, across every Locker on the
// same backend (one per process, or several in one process). It is used by
// many goroutines at once and must be safe for concurrent use.
type Locker interface {
	// Acquire blocks until the lock on name is held, and returns its Lease.
	// Of all Leases on one name, across Lockers and processes, at most one
	// may be held (not yet released, not lapsed) at any moment. It returns:
	//   - an error wrapping ctx.Err() once ctx is done, within
	//     [inventory.DeadlineSlack] of the deadline even if the backend
	//     hangs; nothing is left held (a lock taken after the caller gave
	//     up must be freed, or expire, without blocking the name forever).
	//   - an error wrapping inventory.ErrContention when the Locker gives up
	//     waiting by its own bound (an acquire timeout).
	//   - any other error: the backend failed; no lock is held.
	// name is a SKU, verbatim: any valid SKU bytes, compared byte by byte;
	// each Locker encodes it safely for its own keyspace (a hash, base64).
	Acquire(ctx context.Context, name string) (Lease, error)
}

// Lease is a held lock. A Lease is used by one goroutine (its holder) and
// by the Locker's own renewal.
type Lease interface {
	// Lost returns a channel that is closed once the lock may no longer be
	// held: renewal failed, the session or connection that held it ended,
	// or its time ran out. It must be closed before another holder can take
	// the lock, as far as the Locker can know; where it cannot know (a
	// holder paused past its TTL), the Store's compare-and-set catches the
	// late write. It is never closed by a successful Release alone.
	Lost() <-chan struct{}

	// Release stops renewal and frees the lock. The Manager calls it
	// exactly once per Lease, even after Lost, with a ctx that outlives the
	// caller's by a bounded time. It must never free a lock that is no
	// longer this Lease's (one that lapsed and was taken by another): it
	// then frees nothing and returns an error. A Release that fails leaves
	// the lock to expire on its own.
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

// Manager is an [inventory.StockManager] and an [inventory.OrderManager]
// (when its Store is a [HoldStore]) that moves stock under a lock with
// a conditional write. It is safe for concurrent use.
type Manager struct {
	face        // validates, checks ctx, wraps errors; calls *backend
	locker      Locker
	store       Store
	maxAttempts int
	abandon     time.Duration // see WithAbandonGrace
	pending     pendingOrders // orders whose expired lines are not to be released yet
	name        string        // WithName
	ledger      LedgerStore   // the Store, when it keeps a movement ledger; nil otherwise (ledger.go)

	beforeWrite func(sku string) // test hook: runs between the checks and the write
}

var _ inventory.StockManager = (*Manager)(nil)

// face is the Manager's [front.Front], embedded under a name of its own so
// that the field stays unexported.
type face = front.Front

type config struct {
	name        string
	maxAttempts int
	badAttempts error // WithMaxAttempts out of range: NewManager reports it
	abandon     time.Duration
}

// Option configures a Manager. A nil Option is ignored.
type Option func(*config)

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its conditional write finds the stock moved (its lock had lapsed), before
// it gives up with inventory.ErrContention. It must be at least 1:
// [NewManager] refuses less with an error wrapping
// inventory.ErrInvalidArgument (see [inventory] "Options"). The default is
// [DefaultMaxAttempts].
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		c.maxAttempts, c.badAttempts = n, nil
		if n < 1 {
			c.badAttempts = fmt.Errorf("max attempts %d is below 1", n)
		}
	}
}

// WithName sets the name that prefixes the Manager's errors, as in
// `redislock: reduce "sku": ...`. The default is "lockmgr".
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// NewManager returns a Manager that locks with l and keeps stock in s. It
// fails with an error wrapping inventory.ErrInvalidArgument when l or s is
// nil or an option is out of range. It does no I/O.
func NewManager(l Locker, s Store, opts ...Option) (*Manager, error) {
	c := config{name: "lockmgr", maxAttempts: DefaultMaxAttempts, abandon: AbandonGrace}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch name := cmp.Or(c.name, "lockmgr"); {
	case l == nil || s == nil:
		return nil, fmt.Errorf("%w: %s: nil Locker or Store", inventory.ErrInvalidArgument, name)
	case c.badAttempts != nil:
		return nil, fmt.Errorf("%w: %s: %w", inventory.ErrInvalidArgument, name, c.badAttempts)
	}
	m := &Manager{locker: l, store: s, maxAttempts: c.maxAttempts, abandon: c.abandon, name: cmp.Or(c.name, "lockmgr")}
	if ls, ok := s.(LedgerStore); ok && ls.KeepsLedger() {
		m.ledger = ls
	}
	m.face = front.New(c.name, (*backend)(m), nil)
	return m, nil
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
func (b *backend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
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
func (m *Manager) attempt(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (rem int64, done bool, err error) {
	lease, err := m.locker.Acquire(ctx, sku)
	if err != nil {
		return 0, true, fmt.Errorf("lock: %w", err)
	}
	defer release(ctx, lease)

	if key != "" {
		if r, found, err := m.store.Seen(ctx, sku, dir, key); err != nil || found {
			return r, true, duplicate(err, key)
		}
	}
	cur, version, err := m.read(ctx, sku)
	if err != nil {
		return 0, true, err
	}
	next, err := moved(cur, qty, dir)
	if err != nil {
		return cur, true, err
	}
	ctx = m.note(ctx, Note{Kind: moveKind(dir), Units: qty, Key: key, Ref: driver.Ref(ctx)})
	return m.write(ctx, lease, sku, version, next, dir, key)
}

// moved is the stock cur after moving qty in direction dir, or why the
// move is refused.
func moved(cur, qty int64, dir driver.Direction) (int64, error) {
	if dir == driver.DirReduce {
		if cur < qty {
			return 0, fmt.Errorf("%w: has %d, asked %d", inventory.ErrInsufficientStock, cur, qty)
		}
		return cur - qty, nil
	}
	if err := driver.CheckReturn(cur, qty); err != nil {
		return 0, err
	}
	return cur + qty, nil
}

// write is the end of attempt: unless lease is lost, it sets sku to next
// if its version is still version, recording key. done is false when the
// stock moved since the read.
func (m *Manager) write(ctx context.Context, lease Lease, sku string, version, next int64, dir driver.Direction, key string) (rem int64, done bool, err error) {
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

// release frees lease. The outcome of the locked work stands whatever
// Release says: a lock it failed to free expires on its own. Release runs
// even once ctx is done, but the caller waits for it only while ctx lives: a
// stalled network must not hold a call past its deadline.
func release(ctx context.Context, lease Lease) {
	detached(ctx, func(ctx context.Context) { _ = lease.Release(ctx) })
}

// detached runs fn with a ctx that outlives ctx by at most releaseTimeout,
// and waits for it while ctx lives.
func detached(ctx context.Context, fn func(ctx context.Context)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		fn(dctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// duplicate is the error of a Seen that found an entry, or failed with err.
func duplicate(err error, key string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
}
