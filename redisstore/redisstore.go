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
// was cut short, though Redis may have run it. The Store's scripts are
// never sent twice ([rediskeys.Script] in the internal package, as
// luascript's): once a call may have reached Redis, its failure is returned
// (its outcome unknown; an idempotency key makes a retry safe), so a write
// runs at most once, at no cost in Redis.
//
// Durability is Redis's: see luascript's package doc. [WithReplicas] makes
// a write wait for n replicas (WAIT) before it is acknowledged.
//
// A Store is also a [github.com/stockkit/inventory/lockmgr.HoldStore]: the
// lock strategies over it take orders (see holds.go for its keys).
//
// With [WithLedger] it keeps the movement ledger of package
// [github.com/stockkit/inventory/ledger] in luascript's per-SKU stream,
// written by the script of each write (moves.go). It is not the
// idempotency keys, which this package's docs also call a ledger.
//
// The client is any [redis.UniversalClient]: a plain client, a failover
// (Sentinel) client or a Redis Cluster client. Every key of one SKU carries
// the same hash tag, so the script's keys share a cluster slot.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/redisledger"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
)

//go:embed stock.lua
var stockLua string

// stockScript is the writes of a SKU (stock.lua) of a Store without a
// movement ledger; one with a ledger has its own (moves.go).
var stockScript = rediskeys.NewScript(redisledger.Off + stockLua)

// Store keeps stock in Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	config
	script *rediskeys.Script // stock.lua, with the ledger's head WithLedger
}

type config struct {
	prefix         string
	keyTTL         time.Duration
	replicas       int
	replicaTimeout time.Duration
	replicasSet    bool  // WithReplicas was given
	ledgerOn       bool  // WithLedger was given
	ledgerMaxLen   int64 // its retention
}

// Option configures a Store. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes [New] fail with an error wrapping
// [inventory.ErrInvalidArgument].
type Option func(*config)

// WithPrefix sets the prefix of every key the Store reads and writes. It
// must be 1 to 64 bytes of UTF-8 without braces or control characters. The
// default is "inv", as for luascript, giving keys such as inv{3f2a...}:s:SKU.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithKeyTTL sets how long idempotency keys are kept; at least one
// millisecond. The default is [inventory.DefaultKeyTTL], 24 hours.
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.keyTTL = d } }

// WithReplicas makes every write (Init, and a CompareAndSet that wrote or
// found its key) wait until n replicas have it, with WAIT n timeout on the
// same connection, before it is acknowledged. n must be at least 1 and
// timeout at least a millisecond (WithReplicas(0, ...) is out of range
// too: leave the option out for no waiting). When fewer than n replicas acknowledge
// within timeout the call returns an error wrapping no sentinel: Redis
// applied the write, but whether it survives a failover is unknown; a retry
// with the same idempotency key is safe. The default is no waiting.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.replicaTimeout, c.replicasSet = n, timeout, true }
}

// New returns a Store over client. The caller owns client and closes it.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore: nil Redis client", inventory.ErrInvalidArgument)
	}
	c := config{prefix: rediskeys.DefaultPrefix, keyTTL: inventory.DefaultKeyTTL}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := rediskeys.ValidateOptions("redisstore", c.prefix, c.keyTTL, c.replicasSet, c.replicas, c.replicaTimeout); err != nil {
		return nil, err
	}
	s := &Store{client: client, config: c, script: stockScript}
	if c.ledgerOn {
		if err := redisledger.CheckMaxLen("redisstore", c.ledgerMaxLen); err != nil {
			return nil, err
		}
		s.script = rediskeys.NewScript(redisledger.Head(c.ledgerMaxLen) + stockLua)
	}
	return s, nil
}

// Init sets the stock of sku to qty, creating the SKU if absent. It does not
// forget idempotency keys.
func (s *Store) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
		return err
	}
	key := rediskeys.Stock(s.prefix, sku)
	if s.ledgerOn {
		if _, err := s.eval(ctx, s.script, true, []string{key}, "init", qty, string(ledger.Init), "", "", ""); err != nil {
			return fmt.Errorf("redisstore: init %q: %w", sku, err)
		}
		return nil
	}
	if s.replicas == 0 {
		if err := s.client.Set(ctx, key, qty, 0).Err(); err != nil {
			return fmt.Errorf("redisstore: init %q: %w", sku, err)
		}
		return nil
	}
	var set *redis.StatusCmd
	acked, err := rediskeys.Replicated(ctx, s.client, key, s.replicas, s.replicaTimeout, func(p redis.Pipeliner) {
		set = p.Set(ctx, key, qty, 0)
	})
	if err == nil {
		err = set.Err()
	}
	if err == nil {
		err = s.checkReplicas(acked)
	}
	if err != nil {
		return fmt.Errorf("redisstore: init %q: %w", sku, err)
	}
	return nil
}

// Get returns the stock of sku. The error wraps [inventory.ErrNotFound] when
// sku was never initialised.
func (s *Store) Get(ctx context.Context, sku string) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
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
func (s *Store) Seen(ctx context.Context, sku string, dir driver.Direction, key string) (remaining int64, found bool, err error) {
	if err := validate(sku, dir, key); err != nil {
		return 0, false, err
	}
	if key == "" {
		return 0, false, fmt.Errorf("%w: redisstore: empty idempotency key", inventory.ErrInvalidArgument)
	}
	k := rediskeys.Key(s.prefix, sku, dir, key)
	var get *redis.StringCmd
	var acked int64
	if s.replicas == 0 {
		get = s.client.Get(ctx, k)
	} else if acked, err = rediskeys.Replicated(ctx, s.client, k, s.replicas, s.replicaTimeout, func(p redis.Pipeliner) {
		get = p.Get(ctx, k)
	}); err != nil {
		return 0, false, fmt.Errorf("redisstore: %s %q: read key %q: %w", dir, sku, key, err)
	}
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err == nil && s.replicas > 0:
		// A record found is acknowledged once the replicas have it,
		// as a CompareAndSet that finds its key is.
		err = s.checkReplicas(acked)
	}
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: %s %q: read key %q: %w", dir, sku, key, err)
	}
	// The value is the remaining stock; one written by an earlier version
	// of this package may go on with ":" and the writing call's token.
	rem, _, _ := strings.Cut(v, ":")
	n, err := strconv.ParseInt(rem, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: %s %q: key %q holds %q: %w", dir, sku, key, v, err)
	}
	return n, true, nil
}

// CompareAndSet sets the stock of sku to newStock if it is still version
// and, when key is not empty, records (sku, dir, key) -> newStock for the
// key TTL, in one script. ok is false when the stock moved or the SKU is
// gone; nothing was written. When the key is already recorded nothing is
// written and the error wraps [inventory.ErrDuplicate].
func (s *Store) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (ok bool, err error) {
	if err := validate(sku, dir, key); err != nil {
		return false, err
	}
	if newStock < 0 || newStock > inventory.MaxStock {
		return false, fmt.Errorf("%w: redisstore: new stock %d outside 0..%d", inventory.ErrInvalidArgument, newStock, inventory.MaxStock)
	}
	keys := []string{rediskeys.Stock(s.prefix, sku)}
	mode := "none"
	if key != "" {
		keys = append(keys, rediskeys.Key(s.prefix, sku, dir, key))
		mode = "key"
	}
	args := []any{"cas", version, newStock, s.keyTTL.Milliseconds(), mode}
	if s.ledgerOn {
		def := lockmgr.Note{Kind: ledger.Reduce, Key: key, Ref: driver.Ref(ctx)}
		if dir == driver.DirReturn {
			def.Kind = ledger.Return
		}
		args = s.entryArgs(ctx, args, def)
	}
	res, acked, err := s.run(ctx, keys, args)
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %q: write: %w", dir, sku, err)
	}
	if res == -1 {
		err = fmt.Errorf("%w: %s %q with key %q", inventory.ErrDuplicate, dir, sku, key)
	}
	if res != 0 {
		if rerr := s.checkReplicas(acked); rerr != nil {
			return false, fmt.Errorf("redisstore: %s %q: write: %w", dir, sku, rerr)
		}
	}
	return res == 1, err
}

// checkReplicas returns an error when WithReplicas asked for more replicas
// than acknowledged.
func (s *Store) checkReplicas(acked int64) error {
	if acked >= int64(s.replicas) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d within %v; the write is on the primary, whether it survives a failover is unknown",
		rediskeys.ErrReplicas, acked, s.replicas, s.replicaTimeout)
}

// run runs the script, then, WithReplicas, waits for the replicas on the
// same connection; it returns the script's reply and how many replicas
// acknowledged.
func (s *Store) run(ctx context.Context, keys []string, args []any) (int64, int64, error) {
	cmd, acked, err := s.script.Run(ctx, s.client, s.replicas, s.replicaTimeout, keys, args...)
	if err != nil {
		return 0, 0, err
	}
	res, err := cmd.Int64()
	return res, acked, err
}

// validate checks sku, dir and, unless it is empty, key.
func validate(sku string, dir driver.Direction, key string) error {
	if dir != driver.DirReduce && dir != driver.DirReturn {
		return fmt.Errorf("%w: redisstore: direction %q", inventory.ErrInvalidArgument, dir)
	}
	var opts []inventory.Option
	if key != "" {
		opts = append(opts, inventory.WithKey(key))
	}
	_, err := driver.ValidateMove(sku, 1, opts)
	return err
}
