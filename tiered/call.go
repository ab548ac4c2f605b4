package tiered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/rediskeys"
)

// The helpers every part of the package calls, and that call none of them
// (but the breaker, which result feeds): key names, the SQL transaction,
// reading a script's reply, and what a Redis error means.

// stateKey is the key of sku's state hash, journalKey that of its journal.
func (m *Manager) stateKey(sku string) string   { return rediskeys.Stock(m.cfg.prefix, sku) }
func (m *Manager) journalKey(sku string) string { return rediskeys.Stock(m.cfg.prefix+":j", sku) }

// result tells the breaker the outcome of a Redis call: a call cancelled
// by its caller, or answered with Redis's own error, reached Redis.
func (m *Manager) result(ctx context.Context, err error) {
	m.br.record(err == nil || errors.Is(ctx.Err(), context.Canceled) || isReply(err), time.Now())
}

// isReply reports whether err is Redis's own error reply: Redis was
// reached.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}

// withCtx wraps ctx's error into err, once ctx is done: a Redis call cut
// by its deadline reports an i/o timeout.
func withCtx(ctx context.Context, err error) error {
	c := ctx.Err()
	var ne net.Error
	if d, ok := ctx.Deadline(); c == nil && ok && !time.Now().Before(d) && errors.As(err, &ne) && ne.Timeout() {
		c = context.DeadlineExceeded // the socket's deadline, ctx's, fired first
	}
	if c != nil && !errors.Is(err, c) {
		return fmt.Errorf("%w: %w", c, err)
	}
	return err
}

// tx runs fn in a READ COMMITTED transaction and commits it.
func (m *Manager) tx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	tx, err := m.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// ints reads a script's array reply of integers and decimal strings.
func ints(v any) ([]int64, error) {
	return replyOf(v, func(x any) (int64, bool) {
		switch x := x.(type) {
		case int64:
			return x, true
		case string:
			// An idempotency record: its digits before any ':'.
			if i := strings.IndexByte(x, ':'); i >= 0 {
				x = x[:i]
			}
			n, err := strconv.ParseInt(x, 10, 64)
			return n, err == nil
		}
		return 0, false
	})
}

// replyOf reads a script's non-empty array reply, each element with
// conv.
func replyOf[T any](v any, conv func(any) (T, bool)) ([]T, error) {
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return nil, fmt.Errorf("unexpected script reply %#v", v)
	}
	out := make([]T, len(a))
	for i, x := range a {
		if out[i], ok = conv(x); !ok {
			return nil, fmt.Errorf("unexpected script reply %#v", v)
		}
	}
	return out, nil
}

// sumEach calls f on each of xs in turn and adds up the counts it
// returns, up to the first error.
func sumEach(ctx context.Context, xs []string, f func(context.Context, string) (int, error)) (int, error) {
	total := 0
	for _, x := range xs {
		n, err := f(ctx, x)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// checkReplicas returns an error when WithReplicas asked for more replicas
// than acknowledged a write.
func (m *Manager) checkReplicas(acked int64) error {
	if acked >= int64(m.cfg.replicas) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d within %v; the write is on the primary, whether it survives a failover is unknown",
		rediskeys.ErrReplicas, acked, m.cfg.replicas, m.cfg.replicaTO)
}

// infoField returns the value of name in an INFO reply.
func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// groups returns n placeholder groups of k placeholders (written ?), the
// first in parentheses after IN, the second after VALUES: "(?, ?), (?, ?)"
// for n = 2 and k = 2, "(?, ?)" for n = 2 and k = 1.
func groups(n, k int) string {
	if k == 1 {
		return "(" + strings.Repeat("?, ", n-1) + "?)"
	}
	g := "(" + strings.Repeat("?, ", k-1) + "?)"
	return strings.Repeat(g+", ", n-1) + g
}
