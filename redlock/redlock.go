// Package redlock moves stock under a Redlock: a lock held on a majority of
// independent Redis servers, taken with [github.com/go-redsync/redsync/v4].
//
// The stock itself lives in a [Store] chosen at construction: a
// *redisstore.Store (Redis) or a *sqlstore.Store (SQL). Each Reduce or
// Return locks its SKU, reads, checks and writes conditionally on what it
// read, then unlocks; so a lock that lapses while its holder is paused ends
// in a retry or [inventory.ErrContention], never in an oversell.
//
// The lock is a key with a random token, set with SET NX PX on every node;
// it is held when a majority (the quorum) said yes within the lock's
// validity. Since only a majority is needed, the strategy keeps working with
// one node of three down. While a call holds the lock, a goroutine extends
// it every third of its expiry, setting it again on nodes that lost it (as
// after a restart); when an extension fails to reach the quorum, the lease
// is marked lost and the call gives up before writing.
//
// Callers of one Manager that want the same SKU queue up in the process,
// in arrival order, and only the first of them contends for the Redlock: a
// crowd of buyers in one process costs the nodes one contender, not
// thousands of SET NX retries. Contenders of different processes retry with
// a jittered, growing delay ([WithRetryDelay]).
//
// # Nodes
//
// Give at least three independent servers: not replicas of one another and
// not a Redis Cluster, whose failover could hand a lock to a second holder.
//
// An attempt to lock waits for every node's answer, for up to redsync's
// timeout factor of the expiry (5%, 400ms by default), so that it never
// leaves a late SET NX behind on a node it has already given up on; only
// the unlock returns as soon as a majority has answered. A call whose ctx
// ends meanwhile does not wait for that: it returns at its deadline, and
// the attempt finishes on its own, freeing the lock should it take it.
//
// So configure the node clients as follows. ContextTimeoutEnabled: true,
// so that each call's ctx bounds its reads (otherwise go-redis waits out its
// ReadTimeout, 3s by default, and an extension or an unlock meant to end
// with the lock's validity outlives it). No retries of their own
// (MaxRetries: -1; the lock retries itself) and a short dial timeout: a
// node that is down then answers at once with an error, instead of after
// go-redis's retries and backoff (about 100ms a call).
package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockkit"
)

// Defaults of the options.
const (
	DefaultPrefix         = "inv:redlock:"
	DefaultExpiry         = 8 * time.Second
	DefaultAcquireTimeout = 10 * time.Second
	DefaultMinRetryDelay  = 2 * time.Millisecond
	DefaultMaxRetryDelay  = 64 * time.Millisecond
)

// MinNodes is the smallest number of Redis servers New accepts.
const MinNodes = 3

// Store keeps the stock rows and the idempotency ledger: a
// *redisstore.Store or a *sqlstore.Store.
type Store = lockmgr.Store

// Manager is an [inventory.StockManager] that moves stock under a Redlock.
// It is safe for concurrent use. It is the generic [lockmgr.Manager] over
// this package's lock.
type Manager = lockmgr.Manager

// Option configures a Manager or a Locker. Options follow the rule of the
// root package (see [inventory] "Options"): a nil Option is ignored, and an
// out-of-range value makes [New] and [NewLocker] fail with an error
// wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

type config struct {
	prefix             string
	expiry             time.Duration
	acquireTimeout     time.Duration
	minDelay, maxDelay time.Duration
	redsyncOpts        []redsync.Option
	maxAttempts        int
}

// check returns the error of the first option out of range; the acquire
// timeout is lockkit.NewQueuedLocker's to check.
func (c *config) check() error {
	var bad string
	switch {
	case driver.ValidateSKU(c.prefix) != nil || len(c.prefix) > 64:
		bad = fmt.Sprintf("key prefix %q must be 1..64 bytes of UTF-8 without control characters", c.prefix)
	case c.expiry < 10*time.Millisecond:
		bad = fmt.Sprintf("expiry %v is below 10ms", c.expiry)
	case c.minDelay <= 0 || c.maxDelay < c.minDelay:
		bad = fmt.Sprintf("retry delay %v..%v: want 0 < lo <= hi", c.minDelay, c.maxDelay)
	case c.maxAttempts < 1:
		bad = fmt.Sprintf("max attempts %d is below 1", c.maxAttempts)
	default:
		return nil
	}
	return fmt.Errorf("%w: redlock: %s", inventory.ErrInvalidArgument, bad)
}

// WithPrefix sets the prefix of the lock keys: the lock on a SKU is the key
// prefix+SKU on every node. It must be 1..64 bytes of UTF-8 without control
// characters. The default is [DefaultPrefix], "inv:redlock:".
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithExpiry sets how long a lock lives on the nodes unless extended. A
// holder extends it every third of d, so d bounds how long a crashed
// holder blocks its SKU. The default is [DefaultExpiry], 8s.
func WithExpiry(d time.Duration) Option {
	return func(c *config) { c.expiry = d }
}

// WithAcquireTimeout bounds how long one call waits for its lock before it
// gives up with [inventory.ErrContention] (or, when no node could be
// reached, the nodes' error). The ctx of the call bounds it too. The
// default is [DefaultAcquireTimeout], 10s.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) { c.acquireTimeout = d }
}

// WithRetryDelay sets the pause between two attempts to take a lock held
// by someone else: a random duration up to a ceiling that starts at lo and
// doubles after each failed attempt up to hi (exponential backoff with full
// jitter). The defaults are [DefaultMinRetryDelay] and
// [DefaultMaxRetryDelay], 2ms and 64ms: short enough that a freed lock is
// soon taken again, long enough that a crowd of waiters does not swamp
// the nodes.
func WithRetryDelay(lo, hi time.Duration) Option {
	return func(c *config) { c.minDelay, c.maxDelay = lo, hi }
}

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its conditional write finds that the stock moved (its lock had lapsed),
// before it gives up with [inventory.ErrContention]. It must be at least 1.
// The default is [lockmgr.DefaultMaxAttempts], 3. A Locker ignores it.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = n }
}

// WithRedsyncOptions passes options to every redsync mutex, after this
// package's own, so they can override them (redsync.WithExpiry, set by
// [WithExpiry], and redsync.WithSetNXOnExtend; redsync.WithFailFast(true) for
// unlocking only), or add others such as redsync.WithDriftFactor or
// redsync.WithTimeoutFactor. Retries are this package's (see
// [WithRetryDelay]); redsync.WithTries has no effect. The default is none.
func WithRedsyncOptions(opts ...redsync.Option) Option {
	return func(c *config) { c.redsyncOpts = append(c.redsyncOpts, opts...) }
}

// New returns a Manager that locks SKUs on the given independent Redis
// servers, at least [MinNodes] of them, and keeps stock in store. The
// caller keeps ownership of the clients and closes them.
//
// New does no I/O. An invalid argument or option gives an error wrapping
// [inventory.ErrInvalidArgument].
func New(clients []redis.UniversalClient, store Store, opts ...Option) (*Manager, error) {
	l, cfg, err := newLocker(clients, opts)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: redlock: nil store", inventory.ErrInvalidArgument)
	}
	return lockmgr.NewManager(l, store, lockmgr.WithName("redlock"), lockmgr.WithMaxAttempts(cfg.maxAttempts))
}

// NewLocker returns the lock a Manager with these arguments uses, to use on
// its own: a Redlock per name, extended while held, with in-process
// queueing as the package documentation describes. It does no I/O.
func NewLocker(clients []redis.UniversalClient, opts ...Option) (lockmgr.Locker, error) {
	l, _, err := newLocker(clients, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// locker takes Redlocks for the head of a lockmgr queue
// ([lockkit.NewQueuedLocker]): one caller per SKU and process contends.
type locker struct {
	rs      *redsync.Redsync
	quorum  int
	cfg     config
	mutexes []redsync.Option // to lock and extend
	unlocks []redsync.Option // to unlock, but for the token
}

func newLocker(clients []redis.UniversalClient, opts []Option) (lockmgr.Locker, config, error) {
	cfg := config{
		prefix:         DefaultPrefix,
		expiry:         DefaultExpiry,
		acquireTimeout: DefaultAcquireTimeout,
		minDelay:       DefaultMinRetryDelay,
		maxDelay:       DefaultMaxRetryDelay,
		maxAttempts:    lockmgr.DefaultMaxAttempts,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.check(); err != nil {
		return nil, cfg, err
	}
	if len(clients) < MinNodes {
		return nil, cfg, fmt.Errorf("%w: redlock: %d Redis servers, want at least %d", inventory.ErrInvalidArgument, len(clients), MinNodes)
	}
	pools := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, cfg, fmt.Errorf("%w: redlock: Redis client %d is nil", inventory.ErrInvalidArgument, i)
		}
		pools[i] = goredis.NewPool(c)
	}
	// Locking and extending wait for every node: with fail-fast, a SET NX
	// still on its way to a node could land after the release of a failed
	// attempt, or after the unlock, and hold that node for a whole expiry;
	// a few of those and nobody reaches a majority. An unlock that returns
	// early leaves only token-checked DELs behind, which are harmless.
	base := []redsync.Option{redsync.WithExpiry(cfg.expiry), redsync.WithSetNXOnExtend()}
	l := &locker{
		rs:      redsync.New(pools...),
		quorum:  len(clients)/2 + 1,
		cfg:     cfg,
		mutexes: slices.Concat(base, cfg.redsyncOpts),
		unlocks: slices.Concat(base, []redsync.Option{redsync.WithFailFast(true)}, cfg.redsyncOpts),
	}
	q, err := lockkit.NewQueuedLocker(lockkit.QueuedConfig{Name: "redlock", AcquireTimeout: cfg.acquireTimeout,
		Queue: lockkit.QueueConfig{Depth: 1}}, l.lock)
	return q, cfg, err
}

// lock takes the Redlock on name for the head of the queue
// ([lockkit.TakeFunc]): it tries, and again after a backoff while others
// hold it, until it holds it, ctx is done or actx's acquire timeout passes.
func (l *locker) lock(ctx, actx context.Context, name string, _ *lockkit.Turn[*lease]) (*lease, error) {
	mu := l.rs.NewMutex(l.cfg.prefix+name, l.mutexes...)
	ceiling := l.cfg.minDelay
	var timer *time.Timer
	var last error
	for {
		err := l.try(ctx, mu)
		switch {
		case err == nil:
			return newLease(mu, l.unlocker(mu), l.cfg.expiry), nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("redlock: lock %q: %w", name, ctx.Err())
		}
		last = err
		if actx.Err() == nil {
			if timer == nil {
				timer = time.NewTimer(rand.N(ceiling))
				defer timer.Stop()
			} else {
				timer.Reset(rand.N(ceiling))
			}
			ceiling = min(2*ceiling, l.cfg.maxDelay)
			select {
			case <-timer.C:
				continue
			case <-actx.Done():
			}
		}
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("redlock: lock %q: %w", name, ctx.Err())
		case taken(last):
			return nil, fmt.Errorf("redlock: lock %q: %w: still held by another after %v: %w", name, inventory.ErrContention, l.cfg.acquireTimeout, last)
		default: // the nodes failed: report their errors
			return nil, fmt.Errorf("redlock: lock %q: no quorum of %d nodes within %v: %w", name, l.quorum, l.cfg.acquireTimeout, last)
		}
	}
}

// try makes one attempt to take mu: SET NX PX on every node, each bounded by
// redsync's timeout factor of the expiry; on failure redsync frees the
// nodes it did get. The attempt ignores cancellation, so that this cleanup
// is never cut short and leaves no node locked until expiry, but the caller
// waits for it only while ctx, the caller's, lives: stalled nodes must not
// hold a call past its deadline. (The acquire timeout is checked between
// attempts, so that a timed-out call reports what the last attempt found.)
// An attempt left behind runs on, and frees the lock should it take it
// after all; try returns ctx.Err() then.
func (l *locker) try(ctx context.Context, mu *redsync.Mutex) error {
	done := make(chan error, 1)
	go func() { done <- mu.TryLockContext(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	go func() {
		if <-done != nil {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.expiry)
		defer cancel()
		_, _ = l.unlocker(mu).UnlockContext(uctx)
	}()
	return ctx.Err()
}

// unlocker returns a mutex that unlocks mu's lock, with its token, in
// fail-fast mode.
func (l *locker) unlocker(mu *redsync.Mutex) *redsync.Mutex {
	return l.rs.NewMutex(mu.Name(), slices.Concat(l.unlocks, []redsync.Option{redsync.WithValue(mu.Value())})...)
}

// taken reports whether err, from a failed attempt, says that at least one
// node holds the lock for someone else.
func taken(err error) bool {
	var all *redsync.ErrTaken
	var one *redsync.ErrNodeTaken
	return errors.As(err, &all) || errors.As(err, &one) || errors.Is(err, redsync.ErrFailed)
}

// lease is a held Redlock, extended by a goroutine until released.
type lease struct {
	mu   *redsync.Mutex // holds and extends the lock
	unmu *redsync.Mutex // the same lock and token, unlocking in fail-fast mode
	lost chan struct{}  // closed when an extension failed
	stop chan struct{}  // closed by Release
	done chan struct{}  // closed when the extension goroutine has returned
}

func newLease(mu, unmu *redsync.Mutex, expiry time.Duration) *lease {
	l := &lease{mu: mu, unmu: unmu, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.extend(expiry / 3)
	return l
}

// extend extends the lock every interval until Release, and marks the lease
// lost and returns when an extension fails to reach the quorum before the
// lock's validity ends.
func (l *lease) extend(interval time.Duration) {
	defer close(l.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithDeadline(context.Background(), l.mu.Until())
		ok, _ := l.mu.ExtendContext(ctx)
		cancel()
		if !ok {
			close(l.lost)
			return
		}
	}
}

// Lost is closed once an extension of the lock failed.
func (l *lease) Lost() <-chan struct{} { return l.lost }

// Release stops the extension and deletes the lock from the nodes that
// still hold this lease's token (the queue then lets the next caller of
// the process in).
// It returns once a majority of nodes answered; the DELs still on their way
// to the others are not cancelled with ctx, and end within the node
// clients' timeouts.
func (l *lease) Release(ctx context.Context) error {
	close(l.stop)
	<-l.done
	ok, err := l.unmu.UnlockContext(context.WithoutCancel(ctx))
	if !ok {
		if err == nil {
			err = redsync.ErrLockAlreadyExpired
		}
		return fmt.Errorf("redlock: unlock %q: %w", l.mu.Name(), err)
	}
	return nil
}
