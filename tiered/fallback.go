package tiered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
)

// Defaults of the circuit breaker ([WithBreaker]).
const (
	DefaultBreakerFailures = 3
	DefaultBreakerOpen     = time.Second
)

// ErrRedisUnreachable is wrapped by the error of a keyed Reduce or Return
// made while the circuit to Redis is open: its idempotency key's record is
// in Redis, so SQL cannot tell whether an earlier call with the key took
// effect, and refuses it. Nothing changed; retry once Redis is back.
var ErrRedisUnreachable = errors.New("tiered: Redis unreachable, keyed call refused")

// ErrFallback is wrapped by the errors of calls that SQL served alone
// while the circuit to Redis was open: an ErrInsufficientStock with it
// says SQL's pool is short, while Redis's allotment may hold more.
var ErrFallback = errors.New("tiered: served by SQL alone, Redis unreachable")

// WithBreaker sets the circuit breaker in front of Redis: after failures
// consecutive calls failed to reach Redis (a network error, a timeout or
// the call's deadline passing, a closed client; not a Redis error reply nor
// a cancelled ctx), the circuit opens
// for open: calls then go to SQL alone (see [Manager.Reduce]); the first
// call after that tries Redis again, and one success closes the circuit.
// failures >= 1, open > 0; the defaults are [DefaultBreakerFailures] and
// [DefaultBreakerOpen].
func WithBreaker(failures int, open time.Duration) Option {
	return func(c *config) { c.brFailures, c.brOpen = failures, open }
}

// breaker counts consecutive failures to reach Redis.
type breaker struct {
	mu    sync.Mutex
	fails int
	until time.Time // open until then
}

// open reports whether calls must skip Redis now.
func (b *breaker) open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().Before(b.until)
}

// result records the outcome of a Redis call.
func (m *Manager) result(ctx context.Context, err error) {
	b := &m.br
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil || errors.Is(ctx.Err(), context.Canceled) || isReply(err) {
		b.fails = 0
		return
	}
	b.fails++
	if b.fails >= m.cfg.brFailures {
		b.until = time.Now().Add(m.cfg.brOpen)
	}
}

// isReply reports whether err is Redis's own error reply: Redis was
// reached.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}

// Fallbacks returns how many calls went to SQL alone while the circuit was
// open.
func (m *Manager) Fallbacks() int64 { return m.fallbacks.Load() }

// fallback moves the stock of sku in SQL alone: a Reduce takes from the
// pool, the units SQL never granted to Redis, so it cannot sell a unit
// Redis holds or sold; a Return adds to the pool. Both count in the row's
// direct sales. The remaining stock returned is the pool (Redis's
// allotment is out of reach).
func (m *Manager) fallback(ctx context.Context, sku string, qty int64, dir inventory.Direction, key string) (int64, error) {
	if key != "" {
		return 0, fmt.Errorf("tiered: %s %q: %w (%w)", dir, sku, ErrRedisUnreachable, ErrFallback)
	}
	m.fallbacks.Add(1)
	var pool, gen, last int64
	var refused error
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		refused = nil
		if err := tx.QueryRowxContext(ctx, m.q.lock, sku).Scan(&pool, &gen, &last); err != nil {
			return err
		}
		delta := qty
		if dir == inventory.DirReduce {
			if qty > pool {
				refused = fmt.Errorf("tiered: reduce %d of %q from SQL's unallotted units: %w (%w)", qty, sku, inventory.ErrInsufficientStock, ErrFallback)
				return nil
			}
			delta = -qty
		} else if err := inventory.CheckReturn(pool, qty); err != nil {
			refused = fmt.Errorf("tiered: return %q to SQL's unallotted units: %w (%w)", sku, err, ErrFallback)
			return nil
		}
		pool += delta
		_, err := tx.ExecContext(ctx, m.q.direct, delta, delta, sku)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("tiered: %s %q: %w (%w)", dir, sku, inventory.ErrNotFound, ErrFallback)
	}
	if err != nil {
		return 0, fmt.Errorf("tiered: %s %q in SQL: %w (%w)", dir, sku, err, ErrFallback)
	}
	if refused != nil {
		if dir == inventory.DirReturn {
			return 0, refused
		}
		return pool, refused
	}
	return pool, nil
}

// getFallback returns SQL's pool of sku while the circuit is open.
func (m *Manager) getFallback(ctx context.Context, sku string) (int64, error) {
	var pool, gen, last int64
	err := m.db.QueryRowxContext(ctx, m.q.read, sku).Scan(&pool, &gen, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("tiered: get %q: %w (%w)", sku, inventory.ErrNotFound, ErrFallback)
	}
	if err != nil {
		return 0, fmt.Errorf("tiered: get %q from SQL: %w (%w)", sku, err, ErrFallback)
	}
	return pool, nil
}
