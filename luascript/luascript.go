// Package luascript keeps stock in Redis and moves it with one Lua script
// that checks and updates atomically on the server.
//
// It is the fastest strategy here: one round trip per call, no lock, no
// retry. Redis runs each script alone, so a check and its write can never be
// split by another buyer. Idempotency keys are written by the same script,
// with an expiry, so a key is recorded if and only if its call took effect.
//
// The client is any [redis.UniversalClient]: a plain client, a failover
// (Sentinel) client or a Redis Cluster client. Every key of one SKU carries
// the same hash tag, so the script's keys always share a cluster slot.
//
// go-redis sends a command again when its connection breaks or times out
// before the reply arrives (MaxRetries, 3 by default; a Cluster client
// always may), though Redis may have run it. luascript's script calls say
// NoRetry to go-redis, which never sends them again once they may have
// reached Redis (redirects, which prove they did not run, are still
// followed): a resent call can never apply twice, and this costs nothing in
// Redis (no record of calls, no memory) and nothing on the wire. A call
// whose connection broke mid-call returns that error instead, its outcome
// unknown as after a timeout: retry it with WithKey, which makes the retry
// safe (a keyed retry of a call that took effect returns ErrDuplicate).
//
// Concurrent calls are merged (see [WithMaxBatch]): while a script call on
// the keys of one Cluster slot is in flight, the calls that arrive for that
// slot queue, and go to Redis together as one script call once it returns;
// each caller still gets its own answer. A lone call is sent at once, with
// no wait. Merged calls share one atomic step, applied in their order.
//
// [WithRefusals] (off by default) refuses, without a round trip, the
// unkeyed Reduces that cannot fit the stock Redis reported less than a TTL
// ago: a sold-out SKU then costs Redis nothing, at the price of refusals up
// to that TTL stale when another process adds units.
//
// [WithLedger] (off by default) keeps a movement ledger (package
// [github.com/stockkit/inventory/ledger]): each move that took effect
// appends its entries to a Redis stream of its SKU, in the script that
// moves the stock, and the Manager is a
// [github.com/stockkit/inventory/ledger.Reader]. Without it the
// scripts do exactly what they did before.
//
// Durability is Redis's. With appendfsync everysec a crash of the Redis
// host can lose the last second of acknowledged sales, idempotency keys
// included, so a retry may sell again; appendfsync always loses none, at
// the cost of an fsync per write. A failover loses what the replicas had not
// received: [WithReplicas] acknowledges a move only after n replicas have
// it.
//
// Set ContextTimeoutEnabled on the go-redis client, so that a call's
// context deadline bounds its network I/O even while Redis hangs;
// otherwise go-redis waits out its own ReadTimeout (3 s by default).
package luascript

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/refusals"
)

//go:embed move.lua
var moveLua string

// moveScript runs orders_holds.lua first, for the lazy release of holds.
var moveScript = rediskeys.NewScript(noLedger + holdsLua + moveLua)

// Manager is an [inventory.StockManager] and an [inventory.OrderManager]
// over Redis: its methods are those of the two interfaces, documented
// there (the order calls as the doc of [LinesTTL] says). It is safe for
// concurrent use.
type Manager struct {
	face   // validates, checks ctx, refuses locally, wraps errors; calls *backend
	client redis.UniversalClient
	config
	ttlMs  int64                      // keyTTL in ms, as the scripts take it
	ttlArg any                        // ttlMs boxed once, for move's arguments
	queue  *merge.Queue[call, answer] // merge.go; nil when calls are not merged (maxBatch 1)
	marks  *slotMarks                 // orders.go; nil but on a Cluster
	// crossSKU: one script call may hold the keys of several SKUs of one
	// slot (a plain or Cluster client).
	crossSKU bool
	scripts  scripts // ledger.go: with or without a ledger
}

var _ inventory.StockManager = (*Manager)(nil)

// face is the Manager's [front.Front], embedded under a name of its own so
// that the field stays unexported.
type face = front.Front

type config struct {
	prefix         string
	keyTTL         time.Duration
	replicas       int
	replicaTimeout time.Duration
	replicasSet    bool // WithReplicas was given
	maxBatch       int
	refusalTTL     time.Duration
	refusalsSet    bool
	ledgerOn       bool  // WithLedger (ledger.go)
	ledgerMaxLen   int64 // its retention, 0: every entry
	orders               // orders.go
}

// Option configures a Manager. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes [New] fail with an error wrapping
// [inventory.ErrInvalidArgument].
type Option func(*config)

// WithPrefix sets the prefix of every key the Manager writes. It must be 1
// to 64 bytes of UTF-8 without braces or control characters. The default is
// "inv", giving keys such as inv{3f2a...}:s:SKU.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithKeyTTL sets how long idempotency keys are kept; at least one
// millisecond. The default is [inventory.DefaultKeyTTL], 24 hours.
//
// Each keyed call that takes effect leaves a record of its own, a string
// key with this TTL: measured on Redis 7.0, about 170 bytes of Redis memory
// for a 12-byte key and a short SKU (the key and SKU bytes add to it),
// on each replica as on the primary. So r keyed calls a second hold about
// r × TTL records at any time: 1,000 a second for the default 24 hours is
// about 15 GB; size the TTL to how long a retry can come.
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.keyTTL = d } }

// WithReplicas makes every write (Init, and a Reduce or Return that moved
// stock or found its key) wait until n replicas have it, with WAIT n timeout
// on the same connection, before it is acknowledged. n must be at least 1
// and timeout at least a millisecond (WithReplicas(0, ...) is out of
// range too: leave the option out for no waiting). When fewer than n replicas
// acknowledge within timeout the call returns an error wrapping neither
// sentinel: Redis applied the move, but whether it survives a failover is
// unknown; retry it with the same idempotency key, which returns
// ErrDuplicate (after waiting again) instead of moving stock twice. The
// default is no waiting. WAIT makes a failover lose nothing acknowledged only
// if failover picks a replica that has the write; it does not fsync.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.replicaTimeout, c.replicasSet = n, timeout, true }
}

// WithMaxBatch sets how many concurrent calls at most are merged into one
// script call, in 1..[MaxBatch]; 1 turns merging off, so that every call is
// its own script call. The default is [DefaultMaxBatch].
//
// Merging is on by default because it only ever waits for a call already
// in flight: a lone call goes to Redis at once, exactly as with merging off,
// and the calls that queue behind a call in flight on their Cluster slot go
// together when it returns, one round trip and one script run for all of
// them. Each call keeps its own outcome: its remaining stock, or
// ErrInsufficientStock when the calls before it in the batch left too
// little, ErrDuplicate when an earlier call (in the batch or before) used
// its key; when the script call fails, every call of the batch gets its
// error. A caller whose ctx ends while queued leaves the queue, unsent,
// with ctx's error (nothing taken); one whose ctx ends after its batch was
// sent returns at once with ctx's error, its outcome unknown (its key makes
// a retry safe). A batch runs with the latest deadline of its calls.
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// DefaultMaxBatch and MaxBatch bound [WithMaxBatch]. Redis runs a batch
// alone, as any script: measured on a 2-core machine, a merged call costs
// Redis about 1 µs of CPU unkeyed and 3.5 µs keyed (a call on its own: 7-9
// µs), so a batch of DefaultMaxBatch keyed calls holds Redis for about a
// millisecond, one of MaxBatch for about 4 ms.
const (
	DefaultMaxBatch = 256
	MaxBatch        = 1024
)

// WithRefusals makes the Manager refuse a Reduce without a round trip when
// Redis refused a Reduce of its SKU less than ttl ago and the stock it saw
// then is less than this Reduce asks: once a flash sale is sold out, the
// buyers' calls are refused in the process. ttl is in 1ms..[MaxRefusalTTL].
// The default is no local refusals.
//
// It never makes a call succeed that Redis would refuse: it only refuses.
// Its price is staleness, bounded by ttl: a local refusal says that the
// stock was below the quantity at some moment during the last ttl (the
// error says so, and carries that stock as the remaining value), so units
// added meanwhile by another process or Manager (a Return, an Init, a
// write outside luascript) can be refused for up to ttl after they were
// added. Units this Manager adds (its Return and Init of the SKU) end the
// SKU's local refusals at once. Calls with an idempotency key always go to
// Redis: one may repeat a call that took effect, which must be told
// ErrDuplicate. What is remembered is bounded: a table of 16384 entries, a
// later SKU that hashes to an entry taking it over.
func WithRefusals(ttl time.Duration) Option {
	return func(c *config) { c.refusalTTL, c.refusalsSet = ttl, true }
}

// MaxRefusalTTL bounds [WithRefusals].
const MaxRefusalTTL = refusals.MaxTTL

// New returns a Manager that keeps stock in client. The caller owns client
// and closes it.
func New(client redis.UniversalClient, opts ...Option) (*Manager, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: luascript: nil Redis client", inventory.ErrInvalidArgument)
	}
	c := config{prefix: rediskeys.DefaultPrefix, keyTTL: inventory.DefaultKeyTTL, maxBatch: DefaultMaxBatch,
		orders: defaultOrders}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := rediskeys.ValidateOptions("luascript", c.prefix, c.keyTTL, c.replicasSet, c.replicas, c.replicaTimeout); err != nil {
		return nil, err
	}
	if c.maxBatch < 1 || c.maxBatch > MaxBatch {
		return nil, fmt.Errorf("%w: luascript: WithMaxBatch(%d): want 1..%d", inventory.ErrInvalidArgument, c.maxBatch, MaxBatch)
	}
	if err := checkLedger(&c); err != nil {
		return nil, err
	}
	if c.refusalsSet {
		if err := front.CheckRefusals("luascript", c.refusalTTL); err != nil {
			return nil, err
		}
	}
	m := &Manager{client: client, config: c, ttlMs: c.keyTTL.Milliseconds(), marks: newSlotMarks(client)}
	m.ttlArg = m.ttlMs
	m.scripts = plainScripts
	if c.ledgerOn {
		m.scripts = ledgerScripts(c.ledgerMaxLen)
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
		m.crossSKU = true
	}
	if c.maxBatch > 1 {
		m.queue = m.newQueue()
	}
	var r *refusals.Table
	if c.refusalsSet {
		r = refusals.New(c.refusalTTL)
	}
	m.face = front.New("luascript", (*backend)(m), r)
	return m, nil
}

// backend is the Manager seen by its front.
type backend Manager

// Init implements [front.Backend].
func (m *backend) Init(ctx context.Context, sku string, qty int64) error {
	if m.ledgerOn {
		return (*Manager)(m).initLedger(ctx, sku, qty)
	}
	key := rediskeys.Stock(m.prefix, sku)
	if m.replicas == 0 {
		return m.client.Set(ctx, key, qty, 0).Err()
	}
	var set *redis.StatusCmd
	acked, err := rediskeys.Replicated(ctx, m.client, key, m.replicas, m.replicaTimeout, func(p redis.Pipeliner) {
		set = p.Set(ctx, key, qty, 0)
	})
	if err == nil {
		err = set.Err()
	}
	if err == nil && acked < int64(m.replicas) {
		err = fmt.Errorf("%w: %d of %d within %v; the write is on the primary, whether it survives a failover is unknown",
			rediskeys.ErrReplicas, acked, m.replicas, m.replicaTimeout)
	}
	return err
}

// Get implements [front.Backend].
func (m *backend) Get(ctx context.Context, sku string) (int64, error) {
	n, err := m.client.Get(ctx, rediskeys.Stock(m.prefix, sku)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, inventory.ErrNotFound
	case err != nil:
		return 0, err
	}
	return n, nil
}

// Move implements [front.Backend].
func (m *backend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return (*Manager)(m).send(ctx, sku, qty, dir, key)
}

// send sends a call to Redis, merged or alone.
func (m *Manager) send(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if m.queue != nil {
		return m.merged(ctx, sku, qty, dir, key)
	}
	return m.move(ctx, sku, qty, dir, key)
}

// signed is qty as the scripts take it: negative for a Return.
func signed(qty int64, dir driver.Direction) int64 {
	if dir == driver.DirReturn {
		return -qty
	}
	return qty
}

// move runs one call as its own script call.
func (m *Manager) move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	stock, marker, rec := rediskeys.MoveKeys(m.prefix, sku, dir, key) // marker: orders.go, the last key
	var a []any
	switch {
	case m.ledgerOn && key == "":
		a = []any{nil, nil, 2, stock, marker, signed(qty, dir), "", "", driver.Ref(ctx)}
	case m.ledgerOn:
		a = []any{nil, nil, 3, stock, rec, marker, signed(qty, dir), m.ttlArg, key, driver.Ref(ctx)}
	case key == "":
		a = []any{nil, nil, 2, stock, marker, signed(qty, dir)}
	default:
		a = []any{nil, nil, 3, stock, rec, marker, signed(qty, dir), m.ttlArg}
	}
	cmd, acked, err := m.scripts.move.RunArgs(ctx, m.client, m.replicas, m.replicaTimeout, stock, a)
	if errors.Is(err, redis.Nil) {
		return 0, inventory.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	switch v := cmd.Val().(type) {
	case int64:
		if v < 0 {
			return m.refused(qty, dir, -1-v)
		}
		return v, m.checkReplicas(acked)
	case []any:
		if len(v) == 1 {
			if rec, ok := v[0].(string); ok {
				return m.duplicate(key, rec, acked)
			}
		}
	}
	return 0, fmt.Errorf("unexpected script reply %v", cmd.Val())
}

// refused is the outcome of a call the stock cur refused.
func (m *Manager) refused(qty int64, dir driver.Direction, cur int64) (int64, error) {
	if dir == driver.DirReturn {
		return cur, driver.CheckReturn(cur, qty)
	}
	return cur, fmt.Errorf("%w: has %d, asked %d", inventory.ErrInsufficientStock, cur, qty)
}

// duplicate is the outcome of a call whose key was recorded as rec: the
// remaining stock, then, from older writers, ":" and more.
func (m *Manager) duplicate(key, rec string, acked int64) (int64, error) {
	n, err := rediskeys.Remaining(rec)
	if err != nil {
		return 0, fmt.Errorf("key %q holds %q: %w", key, rec, err)
	}
	if err := m.checkReplicas(acked); err != nil {
		return n, err
	}
	return n, fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
}

// checkReplicas returns an error when WithReplicas asked for more replicas
// than acknowledged a move.
func (m *Manager) checkReplicas(acked int64) error {
	if acked >= int64(m.replicas) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d within %v; the move is on the primary, whether it survives a failover is unknown (retry with the same key)",
		rediskeys.ErrReplicas, acked, m.replicas, m.replicaTimeout)
}
