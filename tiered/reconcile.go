package tiered

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
)

var (
	//go:embed snapshot.lua
	snapshotLua string
	//go:embed excess.lua
	excessLua string

	snapshotScript = rediskeys.NewScript(snapshotLua)
	excessScript   = rediskeys.NewScript(excessLua)
)

// maxSnapshot bounds the journal entries Reconcile reads per SKU; it syncs
// first, so only the moves made meanwhile remain.
const maxSnapshot = 10000

// Drift is what Reconcile found for one SKU, and what it repaired.
type Drift struct {
	SKU string
	Gen int64 // SQL's generation

	// SQL's figures. LostBefore is the units earlier Reconciles recorded
	// as lost with Redis's state.
	Pool, Granted, Sold, Returned, Direct, LostBefore int64
	// Held is the units SQL knows held in Redis (synced hold moves).
	Held int64
	// Unsynced is the net units (taken less returned) of the journal
	// entries of this generation that SQL has not applied yet.
	Unsynced int64

	// Redis's figures: its allotment, its view of the pool, and the last
	// grant id it applied. RedisMissing: Redis had no state of this
	// generation (lost, or an older generation); it was warmed up.
	Allotment, View, Applied int64
	RedisMissing             bool

	// Expected is the allotment the grants Redis applied leave after the
	// net sales and holds, synced or not, and the units recorded lost.
	Expected int64
	// Lost is Expected less the allotment, when positive: units Redis
	// should hold but does not, as after Redis lost its state (or its
	// journal). They are not given back to the pool: a lost journal may
	// have held sales. They are recorded in SQL (the lost column), so
	// later Reconciles count them as gone, and with [WithLedger] written
	// off in the ledger in the same transaction (ledger.Lost,
	// ledger.LostHeld). Excess is the allotment less Expected, when
	// positive; Reconcile took it out of the allotment.
	Lost, Excess int64
	// GrantsApplied counts grants SQL had made that Redis had not applied
	// (a refill cut between SQL and Redis); Reconcile applied them, and
	// ViewFixed says it set Redis's view of the pool to SQL's.
	GrantsApplied int64
	ViewFixed     bool

	// DoubleApplied counts the keys the syncer found applied twice since
	// the SKU's last Reconcile (see [WithKeyedFallback]): each pair is
	// reported in one Drift. GivenBack is the units given back for them.
	DoubleApplied, GivenBack int64
}

// Clean reports whether Reconcile found nothing to report.
func (d Drift) Clean() bool {
	return !d.RedisMissing && d.Lost == 0 && d.Excess == 0 && d.GrantsApplied == 0 && !d.ViewFixed && d.DoubleApplied == 0
}

// Reconcile compares, for skus (every SKU of the SKU table when none is
// given), SQL's grants and synced sales with Redis's allotment and journal,
// and repairs what it can without ever creating a unit: it applies grants
// SQL made and Redis missed, sets Redis's view of the pool to SQL's, takes
// an excess out of the allotment, and warms up a SKU Redis lost (whose
// allotment is then reported as Lost, not reused). It syncs each SKU first
// and holds its SQL row locked while it compares, so that syncers and
// grants wait; Redis keeps selling meanwhile (its moves are journaled and
// counted). It returns one Drift per SKU.
func (m *Manager) Reconcile(ctx context.Context, skus ...string) ([]Drift, error) {
	for _, sku := range skus {
		if err := driver.ValidateSKU(sku); err != nil {
			return nil, err
		}
	}
	if len(skus) == 0 {
		if err := m.db.SelectContext(ctx, &skus, m.q.skus); err != nil {
			return nil, fmt.Errorf("tiered: reconcile: list SKUs: %w", err)
		}
	}
	out := make([]Drift, 0, len(skus))
	for _, sku := range skus {
		if _, err := m.syncSKU(ctx, sku); err != nil {
			return out, err
		}
		d, err := m.reconcile(ctx, sku)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (m *Manager) reconcile(ctx context.Context, sku string) (Drift, error) {
	d := Drift{SKU: sku}
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		d = Drift{SKU: sku}
		last, err := m.reconcileSQL(ctx, tx, sku, &d)
		if err != nil {
			return err
		}
		snap, err := m.snapshot(ctx, sku)
		if err != nil {
			return err
		}
		d.RedisMissing = !snap.ok || snap.n != d.Gen
		if d.Unsynced, err = m.unsynced(ctx, tx, sku, d.Gen, snap.entries); err != nil {
			return err
		}
		if d.RedisMissing {
			return m.reconcileMissing(ctx, tx, &d, last)
		}
		return m.reconcileLive(ctx, tx, &d, snap, last)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return d, fmt.Errorf("tiered: reconcile %q: %w", sku, inventory.ErrNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("tiered: reconcile %q: %w", sku, err)
	}
	return d, nil
}

// reconcileSQL reads SQL's figures of sku into d, its row locked (so that
// syncers and grants wait), takes the pairs counted since the last
// Reconcile, and returns the SKU's last grant id.
func (m *Manager) reconcileSQL(ctx context.Context, tx *sqlx.Tx, sku string, d *Drift) (int64, error) {
	var last int64
	if err := tx.QueryRowxContext(ctx, m.q.lock, sku).Scan(&d.Pool, &d.Gen, &last); err != nil {
		return 0, err
	}
	var gen2, last2 int64
	if err := tx.QueryRowxContext(ctx, m.q.totals, sku).Scan(&d.Pool, &d.Sold, &d.Returned, &d.Direct, &d.LostBefore, &gen2, &last2, &d.Granted); err != nil {
		return 0, err
	}
	var gen3 int64
	if err := tx.QueryRowxContext(ctx, m.q.held, sku).Scan(&d.Held, &gen3); err != nil {
		return 0, err
	}
	return last, m.takePairs(ctx, tx, sku, d)
}

// redisSnap is Redis's state of a SKU and its journal's first entries, read
// at one instant (snapshot.lua).
type redisSnap struct {
	a, p, n, g int64
	ok         bool // the state hash has every field
	entries    []snapEntry
}

// snapEntry is a journal entry as the snapshot reads it.
type snapEntry struct {
	id     string
	gen, d int64
}

// snapNum reads a number of the snapshot's reply.
func snapNum(v any) (int64, bool) {
	switch v := v.(type) {
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	case int64:
		return v, true
	}
	return 0, false
}

// snapshot reads Redis's state of sku and its journal's entries.
func (m *Manager) snapshot(ctx context.Context, sku string) (redisSnap, error) {
	var s redisSnap
	cmd, _, err := snapshotScript.Run(ctx, m.rdb, 0, 0, []string{m.stateKey(sku), m.journalKey(sku)}, maxSnapshot)
	if err != nil {
		return s, withCtx(ctx, err)
	}
	snap, ok := cmd.Val().([]any)
	if !ok || len(snap) < 5 {
		return s, fmt.Errorf("unexpected snapshot %#v", cmd.Val())
	}
	s.ok = true
	for i, f := range []*int64{&s.a, &s.p, &s.n, &s.g} {
		var ok bool
		*f, ok = snapNum(snap[i])
		s.ok = s.ok && ok
	}
	if count, _ := snapNum(snap[4]); count > maxSnapshot {
		return s, fmt.Errorf("journal holds %d entries, more than %d: is a syncer running?", count, maxSnapshot)
	}
	for i := 5; i+2 < len(snap); i += 3 {
		id, _ := snap[i].(string)
		gen, _ := snapNum(snap[i+1])
		dq, _ := snapNum(snap[i+2])
		s.entries = append(s.entries, snapEntry{id, gen, dq})
	}
	return s, nil
}

// unsynced returns the net units taken by the entries of generation gen
// that the ledger does not hold.
func (m *Manager) unsynced(ctx context.Context, tx *sqlx.Tx, sku string, gen int64, entries []snapEntry) (int64, error) {
	var n int64
	for _, e := range entries {
		if e.gen != gen {
			continue
		}
		var seen int
		err := tx.GetContext(ctx, &seen, m.q.seenEntry, sku, e.id)
		if errors.Is(err, sql.ErrNoRows) {
			n += e.d
			continue
		}
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// reconcileMissing records as lost what Redis held of d's SKU, which it
// no longer has (or has of an older generation), and warms it up again.
func (m *Manager) reconcileMissing(ctx context.Context, tx *sqlx.Tx, d *Drift, last int64) error {
	// Everything granted, not sold (synced or in the journal) and not lost
	// before is lost with Redis's state; the warm-up counts every grant as
	// applied. The holds Redis kept are lost with it too: their units
	// count as lost, no longer as held.
	d.Expected = d.Granted - (d.Sold - d.Returned) - d.Held - d.Unsynced - d.LostBefore
	d.Lost = max(d.Expected+d.Held, 0)
	if _, err := tx.ExecContext(ctx, m.q.lose, d.Lost, d.SKU, d.Gen); err != nil {
		return err
	}
	if err := m.writeOff(ctx, tx, d.SKU, d.Lost, true, "tiered: written off by Reconcile: Redis had no state of this generation (lost, or dropped after a restart)"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, m.q.unhold, d.SKU, d.Gen); err != nil {
		return err
	}
	_, err := m.warmWith(ctx, d.SKU, d.Gen, last, d.Pool)
	return err
}

// reconcileLive compares Redis's allotment of d's SKU with what the grants
// it applied leave, and repairs, while SQL's row is locked: it records the
// units lost (so that later Reconciles count them as gone), takes an
// excess out, applies the grants Redis missed and sets its view of the
// pool.
func (m *Manager) reconcileLive(ctx context.Context, tx *sqlx.Tx, d *Drift, snap redisSnap, last int64) error {
	d.Allotment, d.View, d.Applied = snap.a, snap.p, snap.g
	list, missed, err := m.grantsMissed(ctx, tx, d.SKU, d.Gen, snap.g)
	if err != nil {
		return err
	}
	d.Expected = d.Granted - missed - (d.Sold - d.Returned) - d.Held - d.Unsynced - d.LostBefore
	d.Excess, d.Lost = max(snap.a-d.Expected, 0), max(d.Expected-snap.a, 0)
	if d.Lost > 0 {
		if _, err := tx.ExecContext(ctx, m.q.lose, d.Lost, d.SKU, d.Gen); err != nil {
			return err
		}
		if err := m.writeOff(ctx, tx, d.SKU, d.Lost, false, "tiered: written off by Reconcile: Redis's allotment short of what its grants leave"); err != nil {
			return err
		}
	}
	if d.Excess > 0 {
		if _, _, err := excessScript.Run(ctx, m.rdb, 0, 0, []string{m.stateKey(d.SKU)}, d.Gen, -d.Excess); err != nil && err != redis.Nil {
			return withCtx(ctx, err)
		}
	}
	if len(list) > 0 || snap.p != d.Pool {
		args := append([]any{d.Gen, last, d.Pool}, list...)
		if _, _, err := applyScript.Run(ctx, m.rdb, 0, 0, []string{m.stateKey(d.SKU)}, args...); err != nil {
			return withCtx(ctx, err)
		}
		d.GrantsApplied, d.ViewFixed = int64(len(list)/2), snap.p != d.Pool
	}
	return nil
}

// grantsMissed lists the grants of generation gen after id g (those Redis
// has not applied), as id, qty pairs, and their units.
func (m *Manager) grantsMissed(ctx context.Context, tx *sqlx.Tx, sku string, gen, g int64) ([]any, int64, error) {
	rows, err := tx.QueryxContext(ctx, m.q.grantsAfter, sku, gen, g)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var list []any
	var missed int64
	for rows.Next() {
		var id, qty int64
		if err := rows.Scan(&id, &qty); err != nil {
			return nil, 0, err
		}
		missed += qty
		list = append(list, id, qty)
	}
	return list, missed, rows.Err()
}

// takePairs reads into d the pairs (keys applied twice) counted in sku's
// row since its last Reconcile, and zeroes them.
func (m *Manager) takePairs(ctx context.Context, tx *sqlx.Tx, sku string, d *Drift) error {
	var pool, gen int64
	if err := tx.QueryRowxContext(ctx, m.q.pairsRead, sku).Scan(&pool, &gen, &d.DoubleApplied, &d.GivenBack); err != nil {
		return err
	}
	if d.DoubleApplied == 0 && d.GivenBack == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, m.q.pairsReset, sku)
	return err
}
