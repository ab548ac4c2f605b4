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
// arrives (unless the client's MaxRetries is -1). The script then finds the
// call's own marker, a short-lived key named by a random token, and answers
// again instead of moving stock twice. With retries off there is no marker;
// the caller sees the broken connection and retries with WithKey.
//
// Durability is Redis's: with appendfsync everysec a crash can lose the last
// second of sales; use AOF with appendfsync always, or a SQL strategy, where
// that matters.
package luascript

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
)

//go:embed move.lua
var moveLua string

var moveScript = redis.NewScript(moveLua)

// Manager is an [inventory.StockManager] over Redis. It is safe for
// concurrent use.
type Manager struct {
	client  redis.UniversalClient
	prefix  string
	keyTTL  time.Duration
	resends bool // the client may send a command again after losing its reply
}

// callKeyTTL is how long a call's own marker is kept: long enough to outlast
// the client's retries of one command.
const callKeyTTL = time.Minute

var _ inventory.StockManager = (*Manager)(nil)

// Option configures a Manager.
type Option func(*Manager)

// WithPrefix sets the prefix of every key the Manager writes. It must be 1
// to 64 bytes of UTF-8 without braces or control characters. The default is
// "inv", giving keys such as inv{3f2a...}:s:SKU.
func WithPrefix(p string) Option { return func(m *Manager) { m.prefix = p } }

// WithKeyTTL sets how long idempotency keys are kept; at least one
// millisecond. The default is [inventory.DefaultKeyTTL], 24 hours.
func WithKeyTTL(d time.Duration) Option { return func(m *Manager) { m.keyTTL = d } }

// New returns a Manager that keeps stock in client. The caller owns client
// and closes it.
func New(client redis.UniversalClient, opts ...Option) (*Manager, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: luascript: nil Redis client", inventory.ErrInvalidArgument)
	}
	m := &Manager{client: client, prefix: rediskeys.DefaultPrefix, keyTTL: inventory.DefaultKeyTTL}
	for _, o := range opts {
		o(m)
	}
	if err := rediskeys.ValidatePrefix(m.prefix); err != nil {
		return nil, fmt.Errorf("luascript: %w", err)
	}
	m.resends = resends(client)
	if m.keyTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: luascript: key TTL %v is under 1ms", inventory.ErrInvalidArgument, m.keyTTL)
	}
	return m, nil
}

// Init implements [inventory.StockManager].
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return err
	}
	if err := m.client.Set(ctx, rediskeys.Stock(m.prefix, sku), qty, 0).Err(); err != nil {
		return fmt.Errorf("luascript: init %q: %w", sku, err)
	}
	return nil
}

// Get implements [inventory.StockManager].
func (m *Manager) Get(ctx context.Context, sku string) (int64, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, err
	}
	n, err := m.client.Get(ctx, rediskeys.Stock(m.prefix, sku)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	case err != nil:
		return 0, fmt.Errorf("luascript: get %q: %w", sku, err)
	}
	return n, nil
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
	keys := []string{rediskeys.Stock(m.prefix, sku)}
	hasCall, hasKey := "0", "0"
	if m.resends {
		keys = append(keys, rediskeys.Call(m.prefix, sku, rand.Text()))
		hasCall = "1"
	}
	if o.Key != "" {
		keys = append(keys, rediskeys.Key(m.prefix, sku, dir, o.Key))
		hasKey = "1"
	}
	res, err := moveScript.Run(ctx, m.client, keys, string(dir), qty, inventory.MaxStock,
		m.keyTTL.Milliseconds(), callKeyTTL.Milliseconds(), hasCall, hasKey).Slice()
	if err != nil {
		return 0, fmt.Errorf("luascript: %s %q: %w", dir, sku, err)
	}
	status, n, err := parseReply(res)
	if err != nil {
		return 0, fmt.Errorf("luascript: %s %q: %w", dir, sku, err)
	}
	switch status {
	case "ok":
		return n, nil
	case "dup":
		return n, fmt.Errorf("%w: %s %q with key %q", inventory.ErrDuplicate, dir, sku, o.Key)
	case "notfound":
		return 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	case "insufficient":
		return n, fmt.Errorf("%w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, n, qty)
	case "overflow":
		return n, inventory.CheckReturn(n, qty)
	}
	return 0, fmt.Errorf("luascript: %s %q: unknown script status %q", dir, sku, status)
}

// resends reports whether client may send a command again after losing its
// reply: a *redis.Client retries on a broken connection unless its
// MaxRetries is -1 (0 once the client is made); cluster and other clients
// retry through redirects too, so they are taken to resend. Then every call
// carries a random token, so the script never applies one call twice.
func resends(client redis.UniversalClient) bool {
	if c, ok := client.(*redis.Client); ok {
		return c.Options().MaxRetries > 0
	}
	return true
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
