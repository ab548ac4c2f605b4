// Package redisstore keeps stock and the idempotency ledger in Redis for the
// lock strategies (redislock, redlock, zklock).
//
// It uses the key layout of luascript, so a service can move between
// luascript and a lock strategy over the same data. The version of a SKU is
// its stock value: [Store.CompareAndSet] is a value compare-and-set, done in
// one Lua script that also records the idempotency key with an expiry. A
// value compare-and-set is safe for a counter: whatever happened in between,
// writing cur-n over cur is the same as doing it just then.
//
// Clients retry: go-redis, by default, sends a command again when its reply
// was cut short, though Redis may have run it. So that a write runs at most
// once, each CompareAndSet carries a random token that the script keeps in
// the SKU's write marker, PREFIX{tag}:w:SKU (kept as long as idempotency
// keys); a script that finds its own token there wrote already and reports
// success without writing again.
//
// The client is any [redis.UniversalClient]: a plain client, a failover
// (Sentinel) client or a Redis Cluster client. Every key of one SKU carries
// the same hash tag, so the script's keys share a cluster slot.
package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
)

//go:embed cas.lua
var casLua string

var casScript = redis.NewScript(casLua)

// Store keeps stock in Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
	keyTTL time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the Store reads and writes. It
// must be 1 to 64 bytes of UTF-8 without braces or control characters. The
// default is "inv", as for luascript, giving keys such as inv{3f2a...}:s:SKU.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithKeyTTL sets how long idempotency keys are kept; at least one
// millisecond. The default is [inventory.DefaultKeyTTL], 24 hours.
func WithKeyTTL(d time.Duration) Option { return func(s *Store) { s.keyTTL = d } }

// New returns a Store over client. The caller owns client and closes it.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: nil Redis client", inventory.ErrInvalidArgument)
	}
	s := &Store{client: client, prefix: rediskeys.DefaultPrefix, keyTTL: inventory.DefaultKeyTTL}
	for _, o := range opts {
		o(s)
	}
	if err := rediskeys.ValidatePrefix(s.prefix); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if s.keyTTL < time.Millisecond {
		return nil, fmt.Errorf("%w: redisstore: key TTL %v is under 1ms", inventory.ErrInvalidArgument, s.keyTTL)
	}
	return s, nil
}

// Init sets the stock of sku to qty, creating the SKU if absent. It does not
// forget idempotency keys.
func (s *Store) Init(ctx context.Context, sku string, qty int64) error {
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return err
	}
	if err := s.client.Set(ctx, rediskeys.Stock(s.prefix, sku), qty, 0).Err(); err != nil {
		return fmt.Errorf("redisstore: init %q: %w", sku, err)
	}
	return nil
}

// Get returns the stock of sku. The error wraps [inventory.ErrNotFound] when
// sku was never initialised.
func (s *Store) Get(ctx context.Context, sku string) (int64, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, err
	}
	n, err := s.client.Get(ctx, rediskeys.Stock(s.prefix, sku)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	case err != nil:
		return 0, fmt.Errorf("redisstore: get %q: %w", sku, err)
	}
	return n, nil
}

// Read returns the stock of sku and its version, which is the stock itself.
// The error wraps [inventory.ErrNotFound] when sku was never initialised.
func (s *Store) Read(ctx context.Context, sku string) (stock, version int64, err error) {
	n, err := s.Get(ctx, sku)
	return n, n, err
}

// Seen reports whether a call (sku, dir, key) took effect within the key
// TTL, and the remaining stock it returned.
func (s *Store) Seen(ctx context.Context, sku string, dir inventory.Direction, key string) (remaining int64, found bool, err error) {
	if err := validate(sku, dir, key); err != nil {
		return 0, false, err
	}
	if key == "" {
		return 0, false, fmt.Errorf("%w: redisstore: empty idempotency key", inventory.ErrInvalidArgument)
	}
	n, err := s.client.Get(ctx, rediskeys.Key(s.prefix, sku, dir, key)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("redisstore: %s %q: read key %q: %w", dir, sku, key, err)
	}
	return n, true, nil
}

// CompareAndSet sets the stock of sku to newStock if it is still version
// and, when key is not empty, records (sku, dir, key) -> newStock for the
// key TTL, in one script. ok is false when the stock moved or the SKU is
// gone; nothing was written. When the key is already recorded nothing is
// written and the error wraps [inventory.ErrDuplicate].
func (s *Store) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir inventory.Direction, key string) (ok bool, err error) {
	if err := validate(sku, dir, key); err != nil {
		return false, err
	}
	if newStock < 0 || newStock > inventory.MaxStock {
		return false, fmt.Errorf("%w: redisstore: new stock %d outside 0..%d", inventory.ErrInvalidArgument, newStock, inventory.MaxStock)
	}
	stock := rediskeys.Stock(s.prefix, sku)
	keys := []string{stock, writeMarker(stock, sku)}
	if key != "" {
		keys = append(keys, rediskeys.Key(s.prefix, sku, dir, key))
	}
	res, err := casScript.Run(ctx, s.client, keys, version, newStock, s.keyTTL.Milliseconds(), rand.Text()).Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %q: write: %w", dir, sku, err)
	}
	if res < 0 {
		return false, fmt.Errorf("%w: %s %q with key %q", inventory.ErrDuplicate, dir, sku, key)
	}
	return res == 1, nil
}

// writeMarker returns the key of the SKU's write marker,
// PREFIX{tag}:w:SKU, given its stock key PREFIX{tag}:s:SKU: the same hash
// tag, so the same cluster slot.
func writeMarker(stock, sku string) string {
	return strings.TrimSuffix(stock, ":s:"+sku) + ":w:" + sku
}

// validate checks sku, dir and, unless it is empty, key.
func validate(sku string, dir inventory.Direction, key string) error {
	if dir != inventory.DirReduce && dir != inventory.DirReturn {
		return fmt.Errorf("%w: redisstore: direction %q", inventory.ErrInvalidArgument, dir)
	}
	var opts []inventory.Option
	if key != "" {
		opts = append(opts, inventory.WithKey(key))
	}
	_, err := inventory.ValidateMove(sku, 1, opts)
	return err
}
