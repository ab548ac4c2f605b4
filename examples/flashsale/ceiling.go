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

// ceilingScript is the ceiling row's whole strategy: the bare
// check-and-DECRBY make bench compares luascript with (package baseline).
// It never oversells, but it has no idempotency keys, no resend protection
// and no errors told apart: a missing SKU is "sold out" too.
var ceilingScript = baseline.RedisScript

// ceiling is the ceiling row: one EVALSHA of ceilingScript per Reduce, on the
// same client (pool and all) as luascript's row. It is a ceiling to compare
// the Redis strategies with, not a strategy: it ignores idempotency keys
// (the sale calls it without them), so a buyer who clicks twice buys twice.
type ceiling struct {
	client redis.UniversalClient
	prefix string
}

var _ inventory.StockManager = (*ceiling)(nil)

// key is where the ceiling keeps sku's stock: where luascript would, so
// that the sale's cleanup deletes it.
func (c *ceiling) key(sku string) string { return rediskeys.Stock(c.prefix, sku) }

// Init implements inventory.StockManager with a SET.
func (c *ceiling) Init(ctx context.Context, sku string, qty int64) error {
	if qty < 0 || qty > inventory.MaxStock {
		return fmt.Errorf("ceiling: %w: qty %d", inventory.ErrInvalidArgument, qty)
	}
	return c.client.Set(ctx, c.key(sku), qty, 0).Err()
}

// Reduce implements inventory.StockManager with one EVALSHA of ceilingScript
// (an EVAL only if Redis lost the script).
// It ignores opts: the ceiling has no idempotency keys.
func (c *ceiling) Reduce(ctx context.Context, sku string, qty int64, _ ...inventory.Option) (int64, error) {
	n, err := ceilingScript.Run(ctx, c.client, []string{c.key(sku)}, qty).Int64()
	if err != nil {
		return 0, fmt.Errorf("ceiling: %w", err)
	}
	if n < 0 {
		return 0, fmt.Errorf("ceiling: %w", inventory.ErrInsufficientStock)
	}
	return n, nil
}

// Return implements inventory.StockManager with an INCRBY (no MaxStock
// check: the sale never returns).
func (c *ceiling) Return(ctx context.Context, sku string, qty int64, _ ...inventory.Option) (int64, error) {
	return c.client.IncrBy(ctx, c.key(sku), qty).Result()
}

// Get implements inventory.StockManager with a GET.
func (c *ceiling) Get(ctx context.Context, sku string) (int64, error) {
	n, err := c.client.Get(ctx, c.key(sku)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("ceiling: %w", inventory.ErrNotFound)
	}
	return n, err
}

// newCeiling loads the script (so that every Reduce is an EVALSHA, none an
// EVAL) and returns the ceiling over client.
func newCeiling(ctx context.Context, client redis.UniversalClient, prefix string) (*ceiling, error) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return ceilingScript.Load(ctx, c).Err()
		})
		if err != nil {
			return nil, fmt.Errorf("ceiling: loading the script: %w", err)
		}
	} else if err := ceilingScript.Load(ctx, client).Err(); err != nil {
		return nil, fmt.Errorf("ceiling: loading the script: %w", err)
	}
	return &ceiling{client: client, prefix: prefix}, nil
}
