package tiered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/ledger"
)

// ErrRedisUnreachable is wrapped by the error of a keyed Reduce or Return
// made while the circuit to Redis is open, unless [WithKeyedFallback]: its
// idempotency key's record may be in Redis alone (not synced yet), so SQL
// cannot tell whether an earlier call with the key took effect, and
// refuses it. Nothing changed; retry once Redis is back.
var ErrRedisUnreachable = errors.New("tiered: Redis unreachable, keyed call refused")

// ErrFallback is wrapped by the errors of calls that SQL served alone
// while the circuit to Redis was open: an ErrInsufficientStock with it
// says SQL's pool is short, while Redis's allotment may hold more.
var ErrFallback = errors.New("tiered: served by SQL alone, Redis unreachable")

// startRecovery runs recover in the background; b.mu is held.
func (m *Manager) startRecovery() {
	if m.bg.Err() != nil {
		return // closed: the circuit stays open
	}
	m.wg.Add(1)
	outage := m.br.outage
	go func() {
		defer m.wg.Done()
		_, restarts := m.br.restartSeen()
		if rec, err := m.recoverRedis(outage); err != nil {
			m.br.reopen(err, time.Now()) // a restart seen stays owed
		} else {
			m.br.recovered(rec, restarts)
		}
	}()
}

// recoverRedis checks whether Redis restarted since outage and reconciles
// the SKUs the fallback moved, or every SKU after a restart, in up to
// three passes (the fallback keeps moving SKUs meanwhile).
func (m *Manager) recoverRedis(outage time.Time) (Recovery, error) {
	rec := Recovery{Outage: outage}
	restarted, err := m.recoveryRestarted(outage)
	if err != nil {
		return rec, err
	}
	rec.Restarted = restarted
	done := map[string]bool{}
	for pass := 0; pass < 3; pass++ {
		skus, err := m.recoverySKUs(restarted && pass == 0, done)
		if err != nil {
			return rec, err
		}
		if len(skus) == 0 {
			break
		}
		for _, sku := range skus {
			if done[sku] {
				continue
			}
			d, err := m.recoverSKU(sku, restarted)
			if err != nil {
				return rec, err
			}
			rec.Drifts = append(rec.Drifts, d)
			done[sku] = true
		}
	}
	rec.Closed = time.Now()
	return rec, nil
}

// recoveryStep returns the context of one step of a recovery, bounded by
// the refill timeout.
func (m *Manager) recoveryStep() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.bg, m.cfg.refillTO)
}

// recoveryRestarted reports whether Redis restarted since outage: its
// uptime says so, or the restart watch saw it.
func (m *Manager) recoveryRestarted(outage time.Time) (bool, error) {
	seen := m.watch.accept() // the restarted servers may be dialed again
	ctx, cancel := m.recoveryStep()
	restarted, err := m.restarted(ctx, outage)
	cancel()
	if err != nil {
		return false, fmt.Errorf("tiered: recovery: %w", withCtx(ctx, err))
	}
	pending, _ := m.br.restartSeen()
	return seen || restarted || pending, nil
}

// recoverySKUs returns the SKUs a recovery's pass reconciles: those the
// fallback moved and that are not done, and, when all, every SKU of the
// SKU table.
func (m *Manager) recoverySKUs(all bool, done map[string]bool) ([]string, error) {
	var skus []string
	if all {
		ctx, cancel := m.recoveryStep()
		err := m.db.SelectContext(ctx, &skus, m.q.skus)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("tiered: recovery: list SKUs: %w", err)
		}
	}
	return append(skus, m.br.touchedSKUs(done)...), nil
}

// recoverSKU syncs sku, drops Redis's state of it after a restart (unless
// WithTrustRestarts), reconciles it and copies the fallback's keys of it
// into Redis.
func (m *Manager) recoverSKU(sku string, restarted bool) (Drift, error) {
	// Sync first, as Reconcile does, each round of it bounded on its own:
	// a long journal is applied in several (what a round applied stays
	// applied).
	for round := 1; ; round++ {
		ctx, cancel := m.recoveryStep()
		_, err := m.syncSKU(ctx, sku)
		cancel()
		if err == nil {
			break
		}
		if round == 3 {
			return Drift{}, fmt.Errorf("tiered: recovery: %w", err)
		}
	}
	ctx, cancel := m.recoveryStep()
	defer cancel()
	if restarted && !m.cfg.trustRestarts {
		// A restarted Redis may have come back older than it acknowledged:
		// drop its state of the SKU, so that Reconcile re-warms it from
		// SQL and records what it held as lost, rather than sell units
		// sold already.
		if err := m.rdb.Del(ctx, m.stateKey(sku)).Err(); err != nil {
			return Drift{}, fmt.Errorf("tiered: recovery: drop %q: %w", sku, withCtx(ctx, err))
		}
	}
	d, err := m.reconcile(ctx, sku)
	if err == nil {
		err = m.copyKeys(ctx, sku)
	}
	if err != nil {
		return d, fmt.Errorf("tiered: recovery: %w", err)
	}
	return d, nil
}

// restarted reports whether any Redis master restarted since t, or did not
// say. Redis's uptime_in_seconds is its clock's whole seconds less those of
// its start, so it can read 1 a moment after the start: a master counts as
// restarted when its uptime less one second is no longer than the time
// since t (a Redis that started up to two seconds before t counts too; a
// false restart costs only a reconciliation of every SKU).
func (m *Manager) restarted(ctx context.Context, t time.Time) (bool, error) {
	var mu sync.Mutex
	found := false
	check := func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		up, ok := infoField(info, "uptime_in_seconds")
		n, err := strconv.ParseInt(up, 10, 64)
		r := !ok || err != nil || time.Duration(n-1)*time.Second <= time.Since(t)
		mu.Lock()
		found = found || r
		mu.Unlock()
		return nil
	}
	each := func(ctx context.Context, c *redis.Client) error { return check(ctx, c) }
	var err error
	switch c := m.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = c.ForEachShard(ctx, each)
	default: // one server
		err = check(ctx, m.rdb)
	}
	return found, err
}

// Fallbacks returns how many calls went to SQL alone while the circuit was
// open.
func (m *Manager) Fallbacks() int64 { return m.fallbacks.Load() }

// fbReq is one Reduce or Return the fallback serves, fbAns its answer,
// which the batch that took it sets.
type (
	fbReq struct {
		qty int64
		dir driver.Direction
		key string // "" when unkeyed
		ref string // with a ledger: the call's reference
	}
	fbAns struct {
		rem int64
		err error
	}
	fbCall = merge.Call[fbReq, fbAns]
)

// maxFallbackBatch bounds the calls one fallback transaction serves.
const maxFallbackBatch = 256

// fallback moves the stock of sku in SQL alone: a Reduce takes from the
// pool, the units SQL never granted to Redis, so it cannot sell a unit
// Redis holds or sold; a Return adds to the pool. Both count in the row's
// direct sales. The remaining stock returned is the pool (Redis's
// allotment is out of reach). A keyed call is refused unless
// [WithKeyedFallback]; then its key is checked and recorded in SQL's keys
// table in the transaction that moves the pool.
//
// Concurrent calls on one SKU are combined: while a batch of the SKU is
// written, the calls that arrive queue, and the next batch serves them all
// at once, so that a hot SKU costs SQL one write per batch rather than one
// row-lock wait per call. A batch of unkeyed Reduces that the pool holds
// is one conditional UPDATE (MariaDB/MySQL, PostgreSQL); otherwise a
// transaction reads the row locked, decides each call in order, and
// writes the net change and the keys.
func (m *Manager) fallback(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if key != "" && !m.cfg.keyed.on {
		return 0, fmt.Errorf("tiered: %s %q: %w (%w)", dir, sku, ErrRedisUnreachable, ErrFallback)
	}
	m.fallbacks.Add(1)
	m.br.touch(sku)
	// The calls are applied by a goroutine of their own (merge.Keyed), so
	// that every caller may leave at its deadline. One whose batch was
	// taken may yet take effect, as any call that ends with its context
	// may have.
	a, err := m.fb.Do(ctx, sku, fbReq{qty: qty, dir: dir, key: key, ref: driver.Ref(ctx)})
	if err != nil {
		return 0, fmt.Errorf("tiered: %s %q in SQL: %w (%w)", dir, sku, err, ErrFallback)
	}
	return a.rem, a.err
}

// fbApply serves batch in one transaction, setting every call's answer.
// Its statements stop once every caller in it has given up (ctx).
func (m *Manager) fbApply(ctx context.Context, sku string, _ *struct{}, batch []*fbCall) {
	done, err := m.fbFast(ctx, sku, batch)
	if done {
		return
	}
	if err == nil {
		err = m.tx(ctx, func(tx *sqlx.Tx) error { return m.fbTx(ctx, tx, sku, batch) })
	}
	if err == nil {
		return
	}
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("tiered: %q: %w (%w)", sku, inventory.ErrNotFound, ErrFallback)
	} else {
		err = fmt.Errorf("tiered: %q in SQL: %w (%w)", sku, err, ErrFallback)
	}
	for _, c := range batch {
		c.Ans = fbAns{0, err}
		if cerr := c.Ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			c.Ans.err = fmt.Errorf("%w: %w", err, cerr)
		}
	}
}

// fbTx decides batch's calls in order in tx, with the SKU's row locked,
// and writes the pool's net change and the keys of the keyed calls that
// moved. A keyed call whose key SQL holds a live record of, or that an
// earlier call of the batch used, returns ErrDuplicate with the remaining
// stock recorded.
func (m *Manager) fbTx(ctx context.Context, tx *sqlx.Tx, sku string, batch []*fbCall) error {
	var pool, gen, last int64
	if err := tx.QueryRowxContext(ctx, m.q.lock, sku).Scan(&pool, &gen, &last); err != nil {
		return err
	}
	keys, err := m.fbKeys(ctx, tx, sku, batch)
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	exp := now + m.cfg.keyTTL.Milliseconds()
	cur := pool
	var put []any
	var rows []lrow // with a ledger
	for _, c := range batch {
		id := keyID{c.Req.dir, c.Req.key}
		if r, ok := keys[id]; ok && r.expires > now {
			c.Ans = fbAns{r.rem, fmt.Errorf("tiered: %s %q key %q: %w (%w)", c.Req.dir, sku, c.Req.key, inventory.ErrDuplicate, ErrFallback)}
			continue
		}
		moved := false
		if cur, moved = fbDecide(sku, c, cur); moved && m.cfg.ledgerOn {
			rows = append(rows, fbRow(c.Req))
		}
		if !moved || c.Req.key == "" {
			continue
		}
		keys[id] = keyRecord{rem: cur, src: srcSQL, expires: exp}
		take := c.Req.qty
		if c.Req.dir == driver.DirReturn {
			take = -take
		}
		put = append(put, sku, string(c.Req.dir), c.Req.key, take, cur, srcSQL, exp)
	}
	if err := m.putKeys(ctx, tx, put); err != nil {
		return err
	}
	if err := m.fbLedger(ctx, tx, sku, rows); err != nil || cur == pool {
		return err
	}
	_, err = tx.ExecContext(ctx, m.q.direct, cur-pool, cur-pool, sku)
	return err
}

// fbKeys reads in tx SQL's records of the keys of batch's keyed calls.
func (m *Manager) fbKeys(ctx context.Context, tx *sqlx.Tx, sku string, batch []*fbCall) (map[keyID]keyRecord, error) {
	var ids []keyID
	for _, c := range batch {
		if c.Req.key != "" {
			ids = append(ids, keyID{c.Req.dir, c.Req.key})
		}
	}
	if len(ids) == 0 {
		return map[keyID]keyRecord{}, nil
	}
	return m.findKeys(ctx, tx, sku, ids)
}

// fbLedger writes in tx the ledger rows of a fallback batch's moves, as
// one row after the SKU's last.
func (m *Manager) fbLedger(ctx context.Context, tx *sqlx.Tx, sku string, rows []lrow) error {
	if len(rows) == 0 {
		return nil
	}
	_, st, err := m.ledgerHead(ctx, tx, sku)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return m.writeRows(ctx, tx, sku, st, [][]lrow{rows})
}

// fbRow is the ledger row of a fallback call that moved, dated by the
// database's clock as its transaction writes it.
func fbRow(c fbReq) lrow {
	kind := ledger.Reduce
	if c.dir == driver.DirReturn {
		kind = ledger.Return
	}
	return lrow{kind: kind, units: c.qty, key: c.key, ref: c.ref}
}

// fbDecide decides c on a pool of cur units, setting its answer, and
// returns the pool after it and whether it moved.
func fbDecide(sku string, c *fbCall, cur int64) (int64, bool) {
	if c.Req.dir == driver.DirReduce {
		if c.Req.qty > cur {
			c.Ans = fbAns{cur, fmt.Errorf("tiered: reduce %d of %q from SQL's unallotted units: %w (%w)", c.Req.qty, sku, inventory.ErrInsufficientStock, ErrFallback)}
			return cur, false
		}
		cur -= c.Req.qty
	} else {
		if err := driver.CheckReturn(cur, c.Req.qty); err != nil {
			c.Ans = fbAns{0, fmt.Errorf("tiered: return %q to SQL's unallotted units: %w (%w)", sku, err, ErrFallback)}
			return cur, false
		}
		cur += c.Req.qty
	}
	c.Ans = fbAns{cur, nil}
	return cur, true
}

// fbFast serves a batch of Reduces in one conditional UPDATE, outside a
// transaction, when the pool holds them all: one round trip. It reports
// done once it has set every call's answer. It reports false, having
// changed nothing, when the batch holds a Return or a keyed call, the engine has no such
// statement (SQLite), or the UPDATE changed no row (the pool is short, or
// there is no such SKU): the transaction then decides each call in turn;
// or false and the UPDATE's error, its outcome unknown, which every call of
// the batch then returns. The batch is atomic, so its calls' remaining
// stocks are those of the batch's order.
func (m *Manager) fbFast(ctx context.Context, sku string, batch []*fbCall) (done bool, err error) {
	if m.cfg.ledgerOn { // its rows are written by the transaction
		return false, nil
	}
	var total int64
	for _, c := range batch {
		if c.Req.dir != driver.DirReduce || c.Req.key != "" {
			return false, nil
		}
		total += c.Req.qty
	}
	p := m.cfg.tablePrefix
	var pool int64
	eng, _ := sqldialect.EngineOf(m.db.DriverName()) // New checked it
	switch eng {
	case sqldialect.MySQL:
		// LAST_INSERT_ID(expr) hands the new pool back in the OK packet.
		res, err := m.db.ExecContext(ctx, "UPDATE "+p+"stock SET pool = LAST_INSERT_ID(pool - ?), direct = direct + ? WHERE sku = ? AND pool >= ?", total, total, sku, total)
		if err != nil {
			return false, err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return false, err
		}
		if pool, err = res.LastInsertId(); err != nil {
			return false, err
		}
	case sqldialect.Postgres:
		err := m.db.QueryRowxContext(ctx, "UPDATE "+p+"stock SET pool = pool - $1, direct = direct + $1 WHERE sku = $2 AND pool >= $1 RETURNING pool", total, sku).Scan(&pool)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	default:
		return false, nil
	}
	rem := pool + total
	for _, c := range batch {
		rem -= c.Req.qty
		c.Ans = fbAns{rem, nil}
	}
	return true, nil
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
