package rediskeys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrReplicas is wrapped by the error of a write that Redis applied but that
// fewer replicas than asked acknowledged within the timeout. Its outcome is
// unknown: a failover before the replicas catch up may lose it.
var ErrReplicas = errors.New("fewer replicas acknowledged the write than asked")

// waiter is the WAIT command, which go-redis's Pipeliner interface lacks
// though every pipeline has it (it sets the read timeout WAIT needs).
type waiter interface {
	Wait(ctx context.Context, numReplicas int, timeout time.Duration) *redis.IntCmd
}

// Replicated sends the commands fn queues, then WAIT replicas timeout, in one
// pipeline on one connection to the server that holds key (WAIT counts the
// replicas that have that connection's writes). It returns how many replicas
// acknowledged; the caller reads its commands' results from the commands fn
// queued. On a Cluster client the pipeline goes to the master of key's slot.
func Replicated(ctx context.Context, client redis.UniversalClient, key string, replicas int, timeout time.Duration,
	fn func(p redis.Pipeliner)) (int64, error) {
	var c redis.Cmdable = client
	if cc, ok := client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return 0, err
		}
		c = node
	}
	var wait *redis.IntCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		fn(p)
		w, ok := p.(waiter)
		if !ok {
			return fmt.Errorf("redis pipeline %T has no WAIT", p)
		}
		wait = w.Wait(ctx, replicas, timeout)
		return nil
	})
	if wait == nil {
		return 0, err
	}
	if err != nil && wait.Err() == nil {
		return 0, nil // a queued command failed; the caller reads its error
	}
	if err := wait.Err(); err != nil {
		return 0, fmt.Errorf("wait for %d replicas: %w", replicas, err)
	}
	return wait.Val(), nil
}
