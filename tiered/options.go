package tiered

import (
	"fmt"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Defaults of the options.
const (
	DefaultPrefix        = "tiered"
	DefaultTablePrefix   = "tiered_"
	DefaultChunk         = 1000
	DefaultRefillTimeout = 5 * time.Second
	DefaultMaxAttempts   = 8
	DefaultSyncBatch     = 256
	DefaultSyncInterval  = 100 * time.Millisecond
	DefaultClaimIdle     = 30 * time.Second
	DefaultMaxBatch      = 256
)

// MaxBatch bounds [WithMaxBatch].
const MaxBatch = 1024

// config is what the options set; New checks it once and the parts read it.
type config struct {
	prefix, tablePrefix string
	chunk, lowWater     int64
	lowWaterSet         bool
	keyTTL, refillTO    time.Duration
	attempts            int
	syncBatch           int64
	syncInterval        time.Duration
	claimIdle           time.Duration
	onSyncErr           func(error)
	brFailures          int
	brOpen              time.Duration
	maxBatch            int
	replicas            int
	replicaTO           time.Duration
	replicasSet         bool
	trustRestarts       bool
	keyed               keyedConfig // keys.go
	ledgerOn            bool        // WithLedger (ledger.go)
}

// Option configures [New]. A nil Option is ignored; an out-of-range value
// makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithPrefix sets the prefix of the Redis keys (see rediskeys.ValidatePrefix
// for what it may be). The default is [DefaultPrefix].
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTablePrefix sets the prefix of the SQL table names: a letter or
// underscore, then letters, digits or underscores, 1 to 40 bytes. The
// default is [DefaultTablePrefix].
func WithTablePrefix(p string) Option { return func(c *config) { c.tablePrefix = p } }

// WithChunk sets the units SQL grants Redis at a time (more when one
// Reduce needs more), 1..MaxStock. The default is [DefaultChunk].
//
// Size the chunk, and the low-water mark ([WithLowWater]), for a SKU's
// peak rate: the units below the low-water mark must last while a
// background grant (one SQL transaction, then one script call) lands, or
// calls find the allotment empty and wait for it. In `make bench` on a
// 2-core machine, chunk 20,000 with low water 10,000 had no such wait at
// 108,000-207,000 calls/s on one SKU over MariaDB. A larger chunk keeps
// more units in Redis's allotment, which the fallback cannot sell while
// Redis is unreachable.
func WithChunk(n int64) Option { return func(c *config) { c.chunk = n } }

// WithLowWater sets the allotment below which a Reduce asks for the next
// chunk, 0..chunk (0: only when a Reduce finds it short). The default is a
// quarter of the chunk.
func WithLowWater(n int64) Option { return func(c *config) { c.lowWater, c.lowWaterSet = n, true } }

// WithKeyTTL sets how long idempotency keys are remembered, at least a
// millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.keyTTL = d } }

// WithRefillTimeout bounds a background refill; a refill request older
// than this lets another call ask again. At least a millisecond; the
// default is [DefaultRefillTimeout].
func WithRefillTimeout(d time.Duration) Option { return func(c *config) { c.refillTO = d } }

// WithMaxAttempts sets how many times a Reduce calls Redis, granting in
// between, before it gives up with [inventory.ErrContention]; at least 2.
// The default is [DefaultMaxAttempts].
func WithMaxAttempts(n int) Option { return func(c *config) { c.attempts = n } }

// WithSyncBatch sets how many journal entries of one SKU a sync
// transaction applies at most, 1..10000. The default is [DefaultSyncBatch].
func WithSyncBatch(n int) Option { return func(c *config) { c.syncBatch = int64(n) } }

// WithSyncInterval sets how long [Manager.Run] waits between syncs (each
// reads the journals to their end), so about how far SQL's synced sales
// trail Redis; positive. The default is [DefaultSyncInterval].
func WithSyncInterval(d time.Duration) Option { return func(c *config) { c.syncInterval = d } }

// WithClaimIdle sets how long a journal entry read by another syncer may
// stay unacknowledged before Sync takes it over (that syncer is taken to
// be dead); positive. The default is [DefaultClaimIdle].
func WithClaimIdle(d time.Duration) Option { return func(c *config) { c.claimIdle = d } }

// WithSyncErrors makes [Manager.Run] hand each failed sync's error to fn
// (Run carries on either way). The default drops them.
func WithSyncErrors(fn func(error)) Option { return func(c *config) { c.onSyncErr = fn } }

// WithMaxBatch sets how many concurrent calls at most are merged into one
// script call, 1..[MaxBatch]; 1 turns merging off, so that every call is
// its own script call. The default is [DefaultMaxBatch].
//
// Merging only ever waits for a call already in flight: a lone call goes to
// Redis at once, and the calls that queue behind a call in flight go
// together when it returns (on one server the calls of every SKU, on a
// Cluster those of one slot, on a Ring those of one SKU), one round
// trip, one script run and one journal entry per SKU for all of them.
// Each call keeps its own outcome: its remaining stock, or
// ErrInsufficientStock when the calls before it in the batch left too
// little, ErrDuplicate when an earlier call (in the batch or before) used
// its key; a call that finds the allotment short grants, or finds no Redis
// state warms up, and then queues again, while the others are answered at
// once. When the script call fails, every call of the batch gets its error
// (its outcome unknown, as for a call alone). A caller whose ctx ends while
// queued leaves the queue, unsent, with ctx's error (nothing taken); one
// whose ctx ends after its batch was sent returns at once with ctx's error,
// its outcome unknown (its key makes a retry safe). A batch runs with the
// latest deadline of its calls, and counts once for the circuit breaker.
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// WithReplicas makes every move (a Reduce or Return that moved stock or
// found its key, alone or merged) and Init's write to Redis wait until n
// replicas have it, with WAIT n timeout on the same connection, before it
// is acknowledged, as luascript's and redisstore's WithReplicas do. n must
// be at least 1 and timeout at least a millisecond (WithReplicas(0, ...) is
// out of range too: leave the option out for no waiting). When fewer than n
// replicas acknowledge within timeout the call returns an error wrapping
// neither sentinel: Redis applied the move (and journalled it), but whether
// it survives a failover is unknown; retry it with the same idempotency
// key, which returns ErrDuplicate (after waiting again) instead of moving
// stock twice. Grants and warm-ups do not wait: what a failover loses of
// them is applied again from SQL. The default is no waiting. WAIT does not
// fsync, and makes a failover lose no acknowledged move only if it picks a
// replica that has it.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.replicaTO, c.replicasSet = n, timeout, true }
}

// WithTrustRestarts makes the recovery after a Redis restart reconcile
// every SKU (grants applied, excess taken out) instead of dropping Redis's
// state and re-warming it from SQL. Use it only where a restart never
// loses an acknowledged move (appendonly yes with appendfsync always, no
// restore of older data): a Redis that comes back older than it
// acknowledged then sells its forgotten sales again. The default drops.
func WithTrustRestarts() Option { return func(c *config) { c.trustRestarts = true } }

// defaults returns the configuration before any option.
func defaults() config {
	return config{
		prefix: DefaultPrefix, tablePrefix: DefaultTablePrefix, chunk: DefaultChunk,
		keyTTL: inventory.DefaultKeyTTL, refillTO: DefaultRefillTimeout, attempts: DefaultMaxAttempts,
		syncBatch: DefaultSyncBatch, syncInterval: DefaultSyncInterval, claimIdle: DefaultClaimIdle,
		brFailures: DefaultBreakerFailures, brOpen: DefaultBreakerOpen, maxBatch: DefaultMaxBatch,
	}
}

// check sets the defaults that depend on other options (the low-water
// mark) and returns an error wrapping [inventory.ErrInvalidArgument] for
// the first option out of range.
func (c *config) check() error {
	if !c.lowWaterSet {
		c.lowWater = c.chunk / 4
	}
	if err := c.checkStock(); err != nil {
		return err
	}
	if err := c.checkTimes(); err != nil {
		return err
	}
	return rediskeys.ValidateOptions("tiered", c.prefix, c.keyTTL, c.replicasSet, c.replicas, c.replicaTO)
}

// bad returns the error of an option out of range.
func bad(format string, a ...any) error {
	return fmt.Errorf("tiered: %w: "+format, append([]any{inventory.ErrInvalidArgument}, a...)...)
}

// checkStock checks the options of sizes and counts.
func (c *config) checkStock() error {
	switch {
	case c.chunk < 1 || c.chunk > inventory.MaxStock:
		return bad("chunk %d outside 1..%d", c.chunk, inventory.MaxStock)
	case c.lowWater < 0 || c.lowWater > c.chunk:
		return bad("low-water mark %d outside 0..chunk %d", c.lowWater, c.chunk)
	case c.attempts < 2:
		return bad("max attempts %d below 2", c.attempts)
	case c.syncBatch < 1 || c.syncBatch > 10000:
		return bad("sync batch %d outside 1..10000", c.syncBatch)
	case c.maxBatch < 1 || c.maxBatch > MaxBatch:
		return bad("WithMaxBatch(%d): want 1..%d", c.maxBatch, MaxBatch)
	case !identifier.MatchString(c.tablePrefix):
		return bad("table prefix %q is not 1..40 bytes of letters, digits and underscores", c.tablePrefix)
	}
	return nil
}

// checkTimes checks the options of durations and the breaker's (the key
// TTL and the replicas' are rediskeys.ValidateOptions').
func (c *config) checkTimes() error {
	switch {
	case c.refillTO < time.Millisecond:
		return bad("refill timeout %v below 1ms", c.refillTO)
	case c.syncInterval <= 0 || c.claimIdle <= 0:
		return bad("sync interval %v and claim idle %v must be positive", c.syncInterval, c.claimIdle)
	case c.brFailures < 1 || c.brOpen <= 0:
		return bad("breaker of %d failures, open %v: want >= 1 and > 0", c.brFailures, c.brOpen)
	}
	return nil
}
