package rediskeys

import (
	"context"
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
}

// NewScript returns the Script of the Lua source src.
func NewScript(src string) *Script {
	return &Script{src: src, sha: redis.NewScript(src).Hash()}
}

// once is a command go-redis never sends again after it may have reached
// Redis.
type once struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (once) NoRetry() bool { return true }

// cmd returns the EVALSHA (or, with eval, EVAL) command of s with keys and
// args.
func (s *Script) cmd(ctx context.Context, eval bool, keys []string, args []any) once {
	a := make([]any, 0, 3+len(keys)+len(args))
	if eval {
		a = append(a, "eval", s.src)
	} else {
		a = append(a, "evalsha", s.sha)
	}
	a = append(a, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	return once{redis.NewCmd(ctx, a...)}
}

// Run runs s with EVALSHA (and EVAL when Redis answers NOSCRIPT, which it
// does before running anything). When replicas > 0 it then waits, on the
// same connection, for that many replicas (see [Replicated]) and returns
// how many acknowledged. The script's own error is returned as the error.
func (s *Script) Run(ctx context.Context, client redis.UniversalClient, replicas int, timeout time.Duration,
	keys []string, args ...any) (*redis.Cmd, int64, error) {
	for eval := false; ; eval = true {
		cmd := s.cmd(ctx, eval, keys, args)
		var acked int64
		var err error
		if replicas == 0 {
			err = client.Process(ctx, cmd)
		} else {
			acked, err = Replicated(ctx, client, keys[0], replicas, timeout, func(p redis.Pipeliner) {
				_ = p.Process(ctx, cmd)
			})
			if cmd.Err() != nil {
				err = cmd.Err()
			}
		}
		if err != nil && !eval && redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		return cmd.Cmd, acked, err
	}
}
