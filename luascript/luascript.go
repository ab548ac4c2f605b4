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
// go-redis sends a command again when a connection breaks before the reply
// arrives (unless the client's MaxRetries is -1; a Cluster client always
// may). A keyed call then finds its own idempotency key, which carries a
// token of the call, and answers again. A call without a key carries the
// Manager's random id and a sequence number; the script keeps the sequence
// numbers of the Manager's recent calls on the SKU in a ring of 4096 slots (one
// string per minute, PREFIX{tag}:r:ID:MINUTE:SKU, expiring two minutes
// after it was made), answers a copy of a call it finds there (with the
// stock as it is then), and refuses a call whose slot a later call took, so
// no call is applied twice. Redis memory for this is at most 2 x 32 KB per
// live Manager and SKU it touched in the last two minutes, whatever the call
// rate. A call refused that way (it reached Redis after a call of its
// Manager on its SKU 4096 calls later,
// as only a long-delayed resend does) fails with an error whose outcome is
// unknown; retry it with WithKey. With retries off there is no window: the
// caller sees the broken connection and retries with WithKey.
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
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/rediskeys"
)

//go:embed move.lua
var moveLua string

// moveScript runs orders_holds.lua first, for the lazy release of holds.
var moveScript = redis.NewScript(holdsLua + moveLua)

// Manager is an [inventory.StockManager] over Redis. It is safe for
// concurrent use.
type Manager struct {
	f      front.Front // validates, checks ctx, wraps errors; calls *backend
	client redis.UniversalClient
	config
	caller *rediskeys.Caller // nil when the client never sends a command again
	marks  *slotMarks        // orders.go; nil but on a Cluster
}

var _ inventory.StockManager = (*Manager)(nil)

type config struct {
	prefix         string
	keyTTL         time.Duration
	replicas       int
	replicaTimeout time.Duration
	replicasSet    bool // WithReplicas was given
	orders              // orders.go
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

// New returns a Manager that keeps stock in client. The caller owns client
// and closes it.
func New(client redis.UniversalClient, opts ...Option) (*Manager, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: luascript: nil Redis client", inventory.ErrInvalidArgument)
	}
	c := config{prefix: rediskeys.DefaultPrefix, keyTTL: inventory.DefaultKeyTTL, orders: defaultOrders}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := rediskeys.ValidatePrefix(c.prefix); err != nil {
		return nil, fmt.Errorf("luascript: %w", err)
	}
	if c.keyTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: luascript: key TTL %v is under 1ms", inventory.ErrInvalidArgument, c.keyTTL)
	}
	if c.replicasSet && (c.replicas < 1 || c.replicaTimeout < time.Millisecond) {
		return nil, fmt.Errorf("%w: luascript: WithReplicas(%d, %v): want n >= 1 and a timeout of at least 1ms",
			inventory.ErrInvalidArgument, c.replicas, c.replicaTimeout)
	}
	m := &Manager{client: client, config: c, marks: newSlotMarks(client)}
	if rediskeys.Resends(client) {
		m.caller = rediskeys.NewCaller()
	}
	m.f = front.New("luascript", (*backend)(m))
	return m, nil
}

// backend is the Manager seen by its front.
type backend Manager

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

// Init implements [front.Backend].
func (m *backend) Init(ctx context.Context, sku string, qty int64) error {
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
func (m *backend) Move(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error) {
	keys := []string{rediskeys.Stock(m.prefix, sku)}
	mode, arg := "none", ""
	switch {
	case key != "":
		keys = append(keys, rediskeys.Key(m.prefix, sku, dir, key))
		mode = "key"
		if m.caller != nil {
			arg = m.caller.Token(sku)
		}
	case m.caller != nil:
		keys = append(keys, m.caller.Window(m.prefix, sku))
		mode, arg = "window", m.caller.Next(sku)
	}
	keys = append(keys, rediskeys.HoldMarker(m.prefix, sku)) // orders.go: the last key
	args := []any{string(dir), qty, inventory.MaxStock, m.keyTTL.Milliseconds(), mode, arg,
		rediskeys.WindowSize, rediskeys.WindowTTL.Milliseconds()}
	res, acked, err := (*Manager)(m).run(ctx, keys, args)
	if err != nil {
		return 0, err
	}
	status, n, err := parseReply(res)
	if err != nil {
		return 0, err
	}
	if (status == "ok" || status == "dup") && acked < int64(m.replicas) {
		return n, fmt.Errorf("%w: %d of %d within %v; the move is on the primary, whether it survives a failover is unknown (retry with the same key)",
			rediskeys.ErrReplicas, acked, m.replicas, m.replicaTimeout)
	}
	switch status {
	case "ok":
		return n, nil
	case "stale":
		return 0, fmt.Errorf("refused: the call reached Redis after a call of this Manager on its SKU %d calls later, so whether an earlier copy of it took effect is unknown (retry with WithKey)",
			rediskeys.WindowSize)
	case "dup":
		return n, fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
	case "notfound":
		return 0, inventory.ErrNotFound
	case "insufficient":
		return n, fmt.Errorf("%w: has %d, asked %d", inventory.ErrInsufficientStock, n, qty)
	case "overflow":
		return n, inventory.CheckReturn(n, qty)
	}
	return 0, fmt.Errorf("unknown script status %q", status)
}

// run runs the script, then, WithReplicas, waits for the replicas on the
// same connection; it returns the script's reply and how many replicas
// acknowledged.
func (m *Manager) run(ctx context.Context, keys []string, args []any) ([]any, int64, error) {
	cmd, acked, err := rediskeys.Run(ctx, m.client, moveScript, m.replicas, m.replicaTimeout, keys, args...)
	if err != nil {
		return nil, 0, err
	}
	res, err := cmd.Slice()
	return res, acked, err
}

func parseReply(res []any) (string, int64, error) {
	if len(res) != 2 {
		return "", 0, fmt.Errorf("script returned %d values, want 2", len(res))
	}
	status, ok := res[0].(string)
	if !ok {
		return "", 0, fmt.Errorf("script status is %T", res[0])
	}
	switch n := res[1].(type) {
	case int64:
		return status, n, nil
	case string:
		v, err := strconv.ParseInt(n, 10, 64)
		return status, v, err
	}
	return "", 0, fmt.Errorf("script value is %T", res[1])
}
