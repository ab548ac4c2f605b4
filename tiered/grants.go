package tiered

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// The SQL side's grants to Redis, and the warm-ups that load a SKU from
// SQL into Redis. A grant takes a chunk of a SKU's pool in one SQL
// transaction, recorded with its id, then applies every grant Redis has not
// applied (apply.lua, which applies each id once). This process runs at
// most one grant of a SKU at a time, its flight: calls that find the
// allotment short meanwhile add their need to its demand and wait for it.
// The hot path and the order calls ask for grants; nothing here calls
// them.

var (
	//go:embed apply.lua
	applyLua string
	//go:embed warm.lua
	warmLua string

	applyScript = rediskeys.NewScript(applyLua)
	warmScript  = rediskeys.NewScript(warmLua)
)

// grantState is the grants' state in this process: the flight of each SKU
// and its demand, and the counts the Manager reports.
type grantState struct {
	mu          sync.Mutex
	flights     map[string]chan struct{} // sku -> closed when its grant in flight ends
	demand      map[string]int64         // sku -> units asked for by calls waiting on its flight
	refillFails atomic.Int64
	stalls      atomic.Int64
}

// Stalls returns how many calls found Redis's allotment short while SQL
// may have had units, and waited for a grant before they could go on: the
// refills that did not come in time.
func (m *Manager) Stalls() int64 { return m.stalls.Load() }

// RefillFailures returns how many background refills failed (a later call
// asks again once the refill timeout has passed).
func (m *Manager) RefillFailures() int64 { return m.refillFails.Load() }

// refill grants sku the next chunk in the background, unless this process
// already grants sku.
func (m *Manager) refill(sku string, g int64) {
	m.mu.Lock()
	if _, busy := m.flights[sku]; busy || m.bg.Err() != nil {
		m.mu.Unlock()
		return
	}
	done := make(chan struct{})
	m.flights[sku] = done
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.bg, m.cfg.refillTO)
		defer cancel()
		if err := m.fly(ctx, sku, 0, g, done); err != nil {
			m.refillFails.Add(1)
		}
	}()
}

// grantShared grants sku at least need units, or adds need to the demand
// of the grant of sku this process already has in flight and waits for it
// (the caller then calls Redis again, and grants again if that was not
// enough).
func (m *Manager) grantShared(ctx context.Context, sku string, need, after int64) error {
	m.mu.Lock()
	if done, busy := m.flights[sku]; busy {
		m.demand[sku] += need
		m.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("tiered: reduce %q: waiting for a grant: %w", sku, ctx.Err())
		}
	}
	done := make(chan struct{})
	m.flights[sku] = done
	m.mu.Unlock()
	return m.fly(ctx, sku, need, after, done)
}

// maxFlightGrants bounds the grants of one flight.
const maxFlightGrants = 3

// fly runs the flight of sku that done ends: a grant of need units, then
// (at most maxFlightGrants in all) one more for the demand of the calls
// that came to wait meanwhile, up to 16 chunks, so that a burst of buyers
// on a short allotment costs SQL a few grants, not one per buyer.
func (m *Manager) fly(ctx context.Context, sku string, need, after int64, done chan struct{}) error {
	defer func() {
		m.mu.Lock()
		delete(m.flights, sku)
		delete(m.demand, sku)
		m.mu.Unlock()
		close(done)
	}()
	for i := 0; ; i++ {
		last, err := m.grant(ctx, sku, need, after)
		if err != nil {
			return err
		}
		m.mu.Lock()
		d := m.demand[sku]
		delete(m.demand, sku)
		m.mu.Unlock()
		if d == 0 || i+1 == maxFlightGrants {
			return nil
		}
		need, after = min(d, 16*m.cfg.chunk), last
	}
}

// grant takes max(need, chunk) units (or what is left) of sku's pool in
// SQL as the next grant, then applies to Redis every grant after id after.
// It returns SQL's last grant id.
func (m *Manager) grant(ctx context.Context, sku string, need, after int64) (int64, error) {
	args, err := m.grantSQL(ctx, sku, need, after)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("tiered: grant %q: %w", sku, inventory.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("tiered: grant %q in SQL: %w", sku, err)
	}
	gen, last := args[0].(int64), args[1].(int64)
	keys := []string{m.stateKey(sku)}
	for range 3 {
		cmd, _, err := applyScript.Run(ctx, m.rdb, 0, 0, keys, args...)
		if err != nil {
			return 0, fmt.Errorf("tiered: apply grants of %q: %w", sku, withCtx(ctx, err))
		}
		switch g, _ := cmd.Int64(); g {
		case -1:
			// No state, or an older generation: warm up. Grants made
			// before the warm-up count as applied; their units are lost
			// to this generation (an undersell, never an oversell).
			if err := m.warm(ctx, sku); err != nil {
				return 0, err
			}
		case -3:
			// after was behind no grant Redis applied (an older
			// generation's id): every grant of the generation, again.
			if args, err = m.grantArgs(ctx, sku, gen); err != nil {
				return 0, err
			}
		default:
			return last, nil // applied, or Redis is at a newer generation
		}
	}
	return last, nil
}

// grantSQL records the grant in SQL, in one transaction that takes its
// units out of the pool, and returns apply.lua's arguments: the
// generation, the last grant id, the pool left and every grant after id
// after.
func (m *Manager) grantSQL(ctx context.Context, sku string, need, after int64) ([]any, error) {
	var args []any
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		var pool, gen, last int64
		if err := tx.QueryRowxContext(ctx, m.q.lock, sku).Scan(&pool, &gen, &last); err != nil {
			return err
		}
		if n := min(max(need, m.cfg.chunk), pool); n > 0 {
			last++
			pool -= n
			if _, err := tx.ExecContext(ctx, m.q.grant, n, last, sku, gen); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.q.grantRow, sku, gen, last, n); err != nil {
				return err
			}
		}
		rows, err := tx.QueryxContext(ctx, m.q.grantsAfter, sku, gen, after)
		if err != nil {
			return err
		}
		args, err = appendGrants([]any{gen, last, pool}, rows)
		return err
	})
	return args, err
}

// appendGrants appends to args the id and units of each grant rows holds,
// and closes rows.
func appendGrants(args []any, rows *sqlx.Rows) ([]any, error) {
	defer rows.Close()
	for rows.Next() {
		var id, qty int64
		if err := rows.Scan(&id, &qty); err != nil {
			return nil, err
		}
		args = append(args, id, qty)
	}
	return args, rows.Err()
}

// grantArgs returns apply.lua's arguments for every grant of sku's
// generation gen, as SQL has them now.
func (m *Manager) grantArgs(ctx context.Context, sku string, gen int64) ([]any, error) {
	var pool, gen2, last int64
	if err := m.db.QueryRowxContext(ctx, m.q.read, sku).Scan(&pool, &gen2, &last); err != nil {
		return nil, fmt.Errorf("tiered: grants of %q: %w", sku, err)
	}
	if gen2 != gen {
		return []any{gen, int64(-1), int64(0)}, nil // an Init since: applies nothing
	}
	rows, err := m.db.QueryxContext(ctx, m.q.grantsAfter, sku, gen, 0)
	if err == nil {
		var args []any
		if args, err = appendGrants([]any{gen, last, pool}, rows); err == nil {
			return args, nil
		}
	}
	return nil, fmt.Errorf("tiered: grants of %q: %w", sku, err)
}

// Warm loads skus (every SKU of the SKU table when none is given) from SQL
// into Redis before a sale, and grants a chunk to each whose allotment is
// at or below the low-water mark, so that its first buyers do not wait for
// a grant. It is fenced by generation: it never overwrites Redis state of
// the same or a newer generation. It returns how many SKUs it loaded.
func (m *Manager) Warm(ctx context.Context, skus ...string) (int, error) {
	for _, sku := range skus {
		if err := driver.ValidateSKU(sku); err != nil {
			return 0, err
		}
	}
	if len(skus) == 0 {
		if err := m.db.SelectContext(ctx, &skus, m.q.skus); err != nil {
			return 0, fmt.Errorf("tiered: warm: list SKUs: %w", err)
		}
	}
	n := 0
	for _, sku := range skus {
		wrote, _, err := m.warmSQL(ctx, sku)
		if err != nil {
			return n, err
		}
		if wrote {
			n++
		}
		v, err := m.rdb.HMGet(ctx, m.stateKey(sku), "a", "g").Result()
		if err != nil {
			return n, fmt.Errorf("tiered: warm %q: %w", sku, withCtx(ctx, err))
		}
		a, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		g, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		if a <= m.cfg.lowWater {
			if _, err := m.grant(ctx, sku, 0, g); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// warm loads sku from SQL into Redis unless Redis holds its generation.
func (m *Manager) warm(ctx context.Context, sku string) error {
	_, _, err := m.warmSQL(ctx, sku)
	return err
}

func (m *Manager) warmSQL(ctx context.Context, sku string) (wrote bool, last int64, err error) {
	var pool, gen int64
	err = m.db.QueryRowxContext(ctx, m.q.read, sku).Scan(&pool, &gen, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, fmt.Errorf("tiered: %q: %w", sku, inventory.ErrNotFound)
	}
	if err != nil {
		return false, 0, fmt.Errorf("tiered: warm %q from SQL: %w", sku, err)
	}
	wrote, err = m.warmWith(ctx, sku, gen, last, pool)
	if err != nil {
		return false, 0, fmt.Errorf("tiered: warm %q: %w", sku, err)
	}
	return wrote, last, nil
}

func (m *Manager) warmWith(ctx context.Context, sku string, gen, last, pool int64) (bool, error) {
	return m.warmWait(ctx, sku, gen, last, pool, 0)
}

// warmWait is warmWith, waiting for replicas replicas (WithReplicas) when
// it wrote.
func (m *Manager) warmWait(ctx context.Context, sku string, gen, last, pool int64, replicas int) (bool, error) {
	cmd, acked, err := warmScript.Run(ctx, m.rdb, replicas, m.cfg.replicaTO, []string{m.stateKey(sku), m.journalKey(sku)}, gen, last, pool, group)
	m.result(ctx, err)
	if err != nil {
		return false, withCtx(ctx, err)
	}
	n, err := cmd.Int64()
	if err == nil && n == 1 && acked < int64(replicas) {
		err = m.checkReplicas(acked)
	}
	return n == 1, err
}
