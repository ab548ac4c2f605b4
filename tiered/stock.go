package tiered

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// The stock calls of the Manager's backend (the shared front checks every
// argument and the ctx first): each goes to the hot path (merge.go), or to
// the fallback (fallback.go) while the circuit is open, and asks the grants
// (grants.go) for units when Redis's allotment is short.

// stock is the stock half of a Manager's front.Backend.
type stock struct{ m *Manager }

// Init sets the stock of sku to qty: in SQL, as a new generation whose pool
// is qty, then in Redis, fenced by that generation. Redis's allotment of
// the older generation is dropped, and its unsynced moves are ignored by the
// syncer. Idempotency keys are kept.
//
// If Init fails after SQL committed (Redis unreachable), Redis keeps
// selling the older allotment until a refill finds the newer generation;
// repeat the Init.
func (b stock) Init(ctx context.Context, sku string, qty int64) error {
	m := b.m
	m.syncBeforeInit(ctx, sku)
	var gen int64
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, m.q.initUpsert, sku, qty); err != nil {
			return err
		}
		if err := tx.QueryRowxContext(ctx, m.q.initGen, sku).Scan(&gen); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, m.q.initGrants, sku, gen); err != nil || !m.cfg.ledgerOn {
			return err
		}
		return m.initLedger(ctx, tx, sku, qty)
	})
	if err != nil {
		return fmt.Errorf("tiered: init %q in SQL: %w", sku, err)
	}
	if _, err := m.warmWait(ctx, sku, gen, 0, qty, m.cfg.replicas); err != nil {
		return fmt.Errorf("tiered: init %q in Redis: %w", sku, err)
	}
	return nil
}

// Get returns Redis's allotment of sku plus its view of SQL's pool; while
// the circuit is open, SQL's pool alone.
func (b stock) Get(ctx context.Context, sku string) (int64, error) {
	m := b.m
	if m.br.open() {
		return m.getFallback(ctx, sku)
	}
	for range 2 {
		v, err := m.rdb.HMGet(ctx, m.stateKey(sku), "a", "p").Result()
		m.result(ctx, err)
		if err != nil {
			return 0, fmt.Errorf("tiered: get %q: %w", sku, withCtx(ctx, err))
		}
		if v[0] != nil && v[1] != nil {
			a, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
			p, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return 0, fmt.Errorf("tiered: get %q: state hash: %w", sku, err)
			}
			return a + p, nil
		}
		if err := m.warm(ctx, sku); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("tiered: get %q: %w: Redis state vanished twice", sku, inventory.ErrContention)
}

// Move is the backend of Reduce and Return (see the package
// documentation): it takes qty units of sku from Redis's allotment, or
// gives them back, granting from SQL's pool when the allotment is short.
//
// While the circuit to Redis is open ([WithBreaker]), a Reduce takes from
// SQL's pool alone, the units never granted to Redis, and returns the pool
// as the remaining stock (a Return gives back to the pool); a keyed call
// is then refused with [ErrRedisUnreachable], unless [WithKeyedFallback].
// The call whose failure opened the circuit returns its Redis error (its outcome unknown): a call is
// never sent to both.
func (b stock) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return b.m.move(ctx, sku, qty, dir, key)
}

func (m *Manager) move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return m.moveAs(ctx, sku, qty, dir, key, key)
}

// moveAs is move, recorded in the ledger with key lkey (a ReturnLines
// moves each line with a key of its own, and records the call's).
func (m *Manager) moveAs(ctx context.Context, sku string, qty int64, dir driver.Direction, key, lkey string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("tiered: %s %q: %w", dir, sku, err)
	}
	c := req{sku: sku, key: key, qty: qty, dir: dir, rec: m.moveRec(ctx, dir, qty, lkey)}
	stalled := false
	for range m.cfg.attempts {
		if m.br.open() {
			return m.fallback(ctx, sku, qty, dir, key)
		}
		r, err := m.send(ctx, c)
		if err == nil {
			err = r.err
		}
		if err != nil {
			return 0, fmt.Errorf("tiered: %s %q: %w", dir, sku, err)
		}
		switch r.code {
		case codeShort, codeNoState: // grant or warm up, then again
			if err := m.topUp(ctx, sku, r.code, qty-r.w, r.v, &stalled); err != nil {
				return 0, err
			}
		case codeOpen: // not sent: the circuit opened while the call queued
			return m.fallback(ctx, sku, qty, dir, key)
		default:
			return m.outcome(c, r)
		}
	}
	return 0, fmt.Errorf("tiered: %s %q: %w: allotment short after %d attempts", dir, sku, inventory.ErrContention, m.cfg.attempts)
}

// outcome is what a call returns for Redis's final reply r to c.
func (m *Manager) outcome(c req, r reply) (int64, error) {
	switch r.code {
	case codeMoved:
		if r.w >= 0 {
			m.refill(c.sku, r.w)
		}
		if err := m.checkReplicas(r.acked); err != nil {
			return r.v, fmt.Errorf("tiered: %s %q: %w", c.dir, c.sku, err)
		}
		return r.v, nil
	case codeRefused:
		if c.dir == driver.DirReturn {
			return 0, fmt.Errorf("tiered: return %q: %w", c.sku, driver.CheckReturn(r.v, c.qty))
		}
		return r.v, fmt.Errorf("tiered: reduce %d of %q: %w", c.qty, c.sku, inventory.ErrInsufficientStock)
	case codeDuplicate:
		if err := m.checkReplicas(r.acked); err != nil {
			return r.v, fmt.Errorf("tiered: %s %q key %q: %w", c.dir, c.sku, c.key, err)
		}
		return r.v, fmt.Errorf("tiered: %s %q key %q: %w", c.dir, c.sku, c.key, inventory.ErrDuplicate)
	case codeNotHash:
		return 0, fmt.Errorf("tiered: %s %q: state key %s is not a hash", c.dir, c.sku, m.stateKey(c.sku))
	}
	return 0, fmt.Errorf("tiered: %s %q: script replied %+v", c.dir, c.sku, r)
}

// topUp readies sku for a call that Redis answered code: codeShort (its
// allotment g after short of need units) grants from SQL, codeNoState
// warms sku up. The first stall of a call counts in [Manager.Stalls].
func (m *Manager) topUp(ctx context.Context, sku string, code, need, after int64, stalled *bool) error {
	if code == codeNoState {
		return m.warm(ctx, sku)
	}
	if !*stalled {
		*stalled = true
		m.stalls.Add(1)
	}
	return m.grantShared(ctx, sku, need, after)
}
