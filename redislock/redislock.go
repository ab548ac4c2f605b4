// Package redislock is an [inventory.StockManager] that moves stock under a
// Redis lock: SET key token NX PX ttl, with a random token per holder.
//
// A call locks the SKU, reads its stock, checks it and writes it back with a
// compare-and-set on what it read, then unlocks. The lock is renewed while
// held, and the holder learns when renewal fails; if the lock lapses anyway
// (a GC pause, a network stall), the compare-and-set turns the late write
// into a retry or [inventory.ErrContention], never an oversell. Release is a
// token-checked script, so a holder never frees a lock that is no longer
// its own.
//
// Where the stock lives is the [Store] given to [New]: a
// [github.com/stockkit/inventory/redisstore.Store] (the same keys as
// luascript) or a [github.com/stockkit/inventory/sqlstore.Store]. The lock
// always lives in Redis.
//
// # Waiting
//
// Within one process, callers of the same SKU queue in arrival order, and
// only the head of the queue contends for the Redis lock. A caller done with
// the lock hands it, still held, to the next caller of its process, saving
// the round trips of a release and an acquire; after 16 such hand-overs in
// a row it releases the lock so that other processes get their turn.
//
// Across processes, waiters queue in Redis, in arrival order, and each
// release hands the lock over to one of them: a caller that finds the lock
// held joins the lock's queue (a sorted set PREFIX{tag}:q:SKU beside the
// lock key) under its token and its Locker's channel, and the release
// script sets the lock to the head's token and publishes that on the
// head's channel; the woken waiter holds the lock without another try. One
// release thus wakes one process, not every waiting one. Each Locker
// listens on one channel per Redis node (one subscription, kept 200ms past
// its last waiter), and a Locker with a subscription joins the queue with
// its first try.
//
// Failures are bounded so. A waiter whose process is gone (nobody hears
// its channel on the lock's node) is skipped at release, and sent nothing.
// A waiter that gives up (ctx, acquire timeout) leaves the queue; if the
// lock was handed to it meanwhile, its Locker frees it, which hands it on. A waiter whose process is alive but
// stalled (SIGSTOP, a long GC pause) holds what it is handed until the TTL
// runs out, as a stalled holder does. As a safety net for a lost message or
// a lock that lapsed (its holder died), a waiter also tries again when the
// holder's TTL would run out, at most every 250ms or so; a lapsed lock goes
// to whichever waiter tries first. The queue key expires 1s after its last
// waiter's last try, and is deleted when a release empties it. Waiting is
// bounded by the caller's ctx and by the acquire timeout
// ([WithAcquireTimeout]), after which the call fails with
// [inventory.ErrContention].
//
// Processes running a version of this package from before the queue wait
// for the release message it no longer sends: mixed with newer ones, they
// take the lock only by the safety net.
//
// # Deadlines
//
// Every call returns within [inventory.DeadlineSlack] of its ctx deadline,
// even while Redis hangs, provided the go-redis client is made with
// ContextTimeoutEnabled: true (as README advises): otherwise go-redis
// bounds a read by its own ReadTimeout (3s by default), not by the ctx. A
// lock left behind by a call that gave up (its release could not reach
// Redis) lapses after its TTL ([WithTTL]).
//
// The client is any [redis.UniversalClient]. Each lock and queue key
// carries the hash tag of its SKU's stock key (see [LockKey]), so a Redis
// Cluster works too; on a Cluster, a Locker listens for hand-overs on the
// master of the lock's slot, since a PUBLISH counts only the subscribers
// of its node (after a slot moves, a waiter may be skipped and take the
// lock by the safety net instead).
package redislock

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockkit"
)

// Store is where a Manager keeps the stock and the idempotency ledger: a
// [github.com/stockkit/inventory/redisstore.Store] or a
// [github.com/stockkit/inventory/sqlstore.Store]. Its methods are Init, Get,
// Read (stock and version), Seen (a ledger entry) and CompareAndSet (write
// if the version is unchanged, recording the idempotency key).
type Store = lockmgr.Store

// Defaults for the options.
const (
	DefaultTTL            = 5 * time.Second
	DefaultAcquireTimeout = 10 * time.Second
)

// Manager is an [inventory.StockManager] that locks each SKU in Redis while
// it reads and writes the stock in its Store. It is safe for concurrent use.
// It is the generic [lockmgr.Manager] over this package's lock.
type Manager = lockmgr.Manager

type config struct {
	prefix         string
	ttl            time.Duration
	acquireTimeout time.Duration
	maxWait        time.Duration
	maxAttempts    int
}

// Option configures a Manager or a Locker. Options follow the rule of the
// root package (see [inventory] "Options"): a nil Option is ignored, and an
// out-of-range value makes [New] and [NewLocker] fail with an error
// wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithPrefix sets the prefix of the lock keys. It must be 1 to 64 bytes of
// UTF-8 without braces or control characters. The default is "inv", giving
// lock keys such as inv{3f2a...}:lk:SKU, apart from the store's keys.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTTL sets how long a lock lives unless renewed; a held lock is renewed
// every third of it. It must be at least 30ms. The default is [DefaultTTL],
// 5s: the longest a crashed holder can block its SKU.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithAcquireTimeout bounds how long a call waits for a lock before it
// fails with [inventory.ErrContention]; ctx may end the wait sooner. It must
// be positive. The default is [DefaultAcquireTimeout], 10s.
func WithAcquireTimeout(d time.Duration) Option { return func(c *config) { c.acquireTimeout = d } }

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its write finds the stock moved (its lock had lapsed) before it fails with
// [inventory.ErrContention]. It must be at least 1. The default is
// [lockmgr.DefaultMaxAttempts], 3. A Locker ignores it.
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// New returns a Manager that locks in client and keeps stock in store. The
// caller owns both and closes them. New does no I/O.
func New(client redis.UniversalClient, store Store, opts ...Option) (*Manager, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: redislock: nil store", inventory.ErrInvalidArgument)
	}
	l, c, err := newLocker(client, opts)
	if err != nil {
		return nil, err
	}
	return lockmgr.NewManager(l, store, lockmgr.WithName("redislock"), lockmgr.WithMaxAttempts(c.maxAttempts))
}

// NewLocker returns the lock a Manager made with opts uses, to use on its
// own: a SET NX PX lock per name, with renewal, in-process queueing and
// hand-over as the package documentation describes. It does no I/O.
func NewLocker(client redis.UniversalClient, opts ...Option) (lockmgr.Locker, error) {
	l, _, err := newLocker(client, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func newLocker(client redis.UniversalClient, opts []Option) (lockmgr.Locker, config, error) {
	c := config{prefix: rediskeys.DefaultPrefix, ttl: DefaultTTL, acquireTimeout: DefaultAcquireTimeout, maxWait: maxWait, maxAttempts: lockmgr.DefaultMaxAttempts}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch err := rediskeys.ValidatePrefix(c.prefix); {
	case client == nil:
		return nil, c, fmt.Errorf("%w: redislock: nil Redis client", inventory.ErrInvalidArgument)
	case err != nil:
		return nil, c, fmt.Errorf("redislock: %w", err)
	case c.ttl < 30*time.Millisecond:
		return nil, c, fmt.Errorf("%w: redislock: lock TTL %v is under 30ms", inventory.ErrInvalidArgument, c.ttl)
	case c.acquireTimeout <= 0:
		return nil, c, fmt.Errorf("%w: redislock: acquire timeout %v is not positive", inventory.ErrInvalidArgument, c.acquireTimeout)
	case c.maxAttempts < 1:
		return nil, c, fmt.Errorf("%w: redislock: max attempts %d is below 1", inventory.ErrInvalidArgument, c.maxAttempts)
	case c.maxWait <= 0:
		return nil, c, fmt.Errorf("%w: redislock: max wait %v is not positive", inventory.ErrInvalidArgument, c.maxWait)
	}
	l := &locker{client: client, prefix: c.prefix, ttl: c.ttl, acquireTimeout: c.acquireTimeout, maxWait: c.maxWait, id: rand.Text()}
	q, err := lockkit.NewQueuedLocker(lockkit.QueuedConfig{Name: "redislock", AcquireTimeout: c.acquireTimeout,
		Queue: lockkit.QueueConfig{Depth: 1, MaxHandOvers: maxHandoffs}}, l.take)
	return q, c, err
}
