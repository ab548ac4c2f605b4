package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/baseline"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// bareScriptCode is the bare-script row's whole strategy: the bare
// check-and-DECRBY make bench compares luascript with (package baseline).
// It never oversells, but it has no idempotency keys, no resend protection
// and no errors told apart: a missing SKU is "sold out" too.
var bareScriptCode = baseline.RedisScript

// bareScript is the bare-script row: one EVALSHA of bareScriptCode per Reduce, on the
// same client (pool and all) as luascript's row. It is a baseline to compare
// the Redis strategies with, not a strategy: it ignores idempotency keys
// (the sale calls it without them), so a buyer who clicks twice buys twice.
type bareScript struct {
	client redis.UniversalClient
	prefix string
}

var _ inventory.StockManager = (*bareScript)(nil)

// key is where the bare script keeps sku's stock: where luascript would, so
// that the sale's cleanup deletes it.
func (c *bareScript) key(sku string) string { return rediskeys.Stock(c.prefix, sku) }

// Init implements inventory.StockManager with a SET.
func (c *bareScript) Init(ctx context.Context, sku string, qty int64) error {
	if qty < 0 || qty > inventory.MaxStock {
		return fmt.Errorf("bare script: %w: qty %d", inventory.ErrInvalidArgument, qty)
	}
	return c.client.Set(ctx, c.key(sku), qty, 0).Err()
}

// Reduce implements inventory.StockManager with one EVALSHA of bareScriptCode
// (an EVAL only if Redis lost the script).
// It ignores opts: the bare script has no idempotency keys.
func (c *bareScript) Reduce(ctx context.Context, sku string, qty int64, _ ...inventory.Option) (int64, error) {
	n, err := bareScriptCode.Run(ctx, c.client, []string{c.key(sku)}, qty).Int64()
	if err != nil {
		return 0, fmt.Errorf("bare script: %w", err)
	}
	if n < 0 {
		return 0, fmt.Errorf("bare script: %w", inventory.ErrInsufficientStock)
	}
	return n, nil
}

// Return implements inventory.StockManager with an INCRBY (no MaxStock
// check: the sale never returns).
func (c *bareScript) Return(ctx context.Context, sku string, qty int64, _ ...inventory.Option) (int64, error) {
	return c.client.IncrBy(ctx, c.key(sku), qty).Result()
}

// Get implements inventory.StockManager with a GET.
func (c *bareScript) Get(ctx context.Context, sku string) (int64, error) {
	n, err := c.client.Get(ctx, c.key(sku)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("bare script: %w", inventory.ErrNotFound)
	}
	return n, err
}

// newBareScript loads the script (so that every Reduce is an EVALSHA, none an
// EVAL) and returns the bare script over client.
func newBareScript(ctx context.Context, client redis.UniversalClient, prefix string) (*bareScript, error) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return bareScriptCode.Load(ctx, c).Err()
		})
		if err != nil {
			return nil, fmt.Errorf("bare script: loading the script: %w", err)
		}
	} else if err := bareScriptCode.Load(ctx, client).Err(); err != nil {
		return nil, fmt.Errorf("bare script: loading the script: %w", err)
	}
	return &bareScript{client: client, prefix: prefix}, nil
}
