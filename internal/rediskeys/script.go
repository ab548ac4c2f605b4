package rediskeys

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script whose calls go-redis never sends twice.
//
// go-redis sends a command again when its connection breaks or times out
// before the reply arrives (MaxRetries, 3 by default; a Cluster client also
// redirects), though Redis may have run it: a stock move would then be
// applied twice. A Script's calls are commands whose NoRetry method says
// true, which go-redis honours on every client (plain, failover, Cluster,
// Ring, pipelines): once a call may have reached Redis, its failure is
// returned to the caller, never resent. Redirects (MOVED, ASK) and READONLY
// replies, which prove Redis did not run the script, are still followed on
// a Cluster. So a resent script call is never applied twice, at no cost in
// Redis (no record, no memory) and none on the wire. The price is that a
// connection that breaks mid-call fails the call (its outcome unknown, as
// for a timeout) instead of being resent; an idempotency key makes the
// caller's own retry safe.
type Script struct {
	src, sha string
	// srcArg and shaArg are src and sha boxed once, so that a call's
	// arguments do not box them again.
	srcArg, shaArg any
}

// NewScript returns the Script of the Lua source src.
func NewScript(src string) *Script {
	sha := redis.NewScript(src).Hash()
	return &Script{src: src, sha: sha, srcArg: src, shaArg: sha}
}

// once is a command go-redis never sends again after it may have reached
// Redis.
type once struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (once) NoRetry() bool { return true }

// Run runs s with EVALSHA (and EVAL when Redis answers NOSCRIPT, which it
// does before running anything). When replicas > 0 it then waits, on the
// same connection, for that many replicas (see [Replicated]) and returns
// how many acknowledged. The script's own error is returned as the error.
func (s *Script) Run(ctx context.Context, client redis.UniversalClient, replicas int, timeout time.Duration,
	keys []string, args ...any) (*redis.Cmd, int64, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, nil, nil, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	return s.RunArgs(ctx, client, replicas, timeout, keys[0], a)
}

// RunArgs is [Script.Run] with the command's arguments built by the
// caller: a[0] and a[1] are left for RunArgs (EVALSHA and the hash, or EVAL
// and the source), a[2] is the number of keys (an int, as
// [Script.Run] gives it), the keys follow, then the arguments; key is the
// first key. RunArgs keeps a for the command.
//
// A call Redis refused without running it is sent again: NOSCRIPT (as
// EVAL), and TRYAGAIN, a Cluster slot's keys split by a migration, every
// [TryAgainPause] until the slot settles, ctx ends (its error then wraps
// both) or [TryAgainFor] passed; with replicas > 0 on a Cluster, MOVED and
// ASK too, which the node's own pipeline does not follow. On a Cluster
// client any failure makes go-redis reload its slot map in the background,
// so that the next call finds a promoted replica, which it otherwise would
// not learn of before a redirect or its reload interval (a minute): a
// script is never resent by go-redis, so no failure of its own reloads it.
func (s *Script) RunArgs(ctx context.Context, client redis.UniversalClient, replicas int, timeout time.Duration,
	key string, a []any) (*redis.Cmd, int64, error) {
	start := time.Now()
	for eval := false; ; {
		cmd, acked, err := s.send(ctx, client, replicas, timeout, key, a, eval)
		if err == nil {
			return cmd.Cmd, acked, nil
		}
		if !eval && redis.HasErrorPrefix(err, "NOSCRIPT") {
			eval = true
			continue
		}
		if cc, ok := client.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		if slotMoving(err, replicas) && time.Since(start) < TryAgainFor {
			if err = pauseForSlot(ctx, err); err == nil {
				continue
			}
		}
		return cmd.Cmd, acked, err
	}
}

// send sends the call once, as EVAL when eval, else as EVALSHA, then waits
// for replicas when replicas > 0 (see [Replicated]).
func (s *Script) send(ctx context.Context, client redis.UniversalClient, replicas int, timeout time.Duration,
	key string, a []any, eval bool) (once, int64, error) {
	if eval {
		a[0], a[1] = "eval", s.srcArg
	} else {
		a[0], a[1] = "evalsha", s.shaArg
	}
	cmd := once{redis.NewCmd(ctx, a...)}
	if replicas == 0 {
		return cmd, 0, client.Process(ctx, cmd)
	}
	acked, err := Replicated(ctx, client, key, replicas, timeout, func(p redis.Pipeliner) {
		_ = p.Process(ctx, cmd)
	})
	if cmd.Err() != nil {
		err = cmd.Err()
	}
	return cmd, acked, err
}

// slotMoving reports whether err is a refusal, without running the
// script, of a Cluster slot on the move: TRYAGAIN, and with replicas > 0
// MOVED and ASK, which the node's own pipeline does not follow.
func slotMoving(err error, replicas int) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") ||
		replicas > 0 && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}

// pauseForSlot waits [TryAgainPause] and returns nil, or when ctx ends
// first, err wrapping ctx's error as well.
func pauseForSlot(ctx context.Context, err error) error {
	select {
	case <-time.After(TryAgainPause): // collected once unreferenced (Go 1.23)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (not run; sent again until: %w)", err, ctx.Err())
	}
}

// TryAgainPause and TryAgainFor pace [Script.RunArgs]'s sending again of a
// script Redis did not run because its slot is being migrated.
const (
	TryAgainPause = 20 * time.Millisecond
	TryAgainFor   = 10 * time.Second
)
