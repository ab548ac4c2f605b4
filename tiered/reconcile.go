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
	// later Reconciles count them as gone. Excess is the allotment less Expected, when
	// positive; Reconcile took it out of the allotment.
	Lost, Excess int64
	// GrantsApplied counts grants SQL had made that Redis had not applied
	// (a refill cut between SQL and Redis); Reconcile applied them, and
	// ViewFixed says it set Redis's view of the pool to SQL's.
	GrantsApplied int64
	ViewFixed     bool
}

// Clean reports whether Reconcile found nothing to report.
func (d Drift) Clean() bool {
	return !d.RedisMissing && d.Lost == 0 && d.Excess == 0 && d.GrantsApplied == 0 && !d.ViewFixed
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
		var last int64
		if err := tx.QueryRowxContext(ctx, m.q.lock, sku).Scan(&d.Pool, &d.Gen, &last); err != nil {
			return err
		}
		var gen2, last2 int64
		if err := tx.QueryRowxContext(ctx, m.q.totals, sku).Scan(&d.Pool, &d.Sold, &d.Returned, &d.Direct, &d.LostBefore, &gen2, &last2, &d.Granted); err != nil {
			return err
		}
		var gen3 int64
		if err := tx.QueryRowxContext(ctx, m.q.held, sku).Scan(&d.Held, &gen3); err != nil {
			return err
		}
		cmd, _, err := snapshotScript.Run(ctx, m.rdb, 0, 0, []string{m.stateKey(sku), m.journalKey(sku)}, maxSnapshot)
		if err != nil {
			return withCtx(ctx, err)
		}
		snap, ok := cmd.Val().([]any)
		if !ok || len(snap) < 5 {
			return fmt.Errorf("unexpected snapshot %#v", cmd.Val())
		}
		num := func(v any) (int64, bool) {
			switch v := v.(type) {
			case string:
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			case int64:
				return v, true
			}
			return 0, false
		}
		a, okA := num(snap[0])
		p, okP := num(snap[1])
		n, okN := num(snap[2])
		g, okG := num(snap[3])
		count, _ := num(snap[4])
		if count > maxSnapshot {
			return fmt.Errorf("journal holds %d entries, more than %d: is a syncer running?", count, maxSnapshot)
		}
		d.RedisMissing = !(okA && okP && okN && okG) || n != d.Gen
		// Entries of this generation not yet in the ledger.
		for i := 5; i+2 < len(snap); i += 3 {
			id, _ := snap[i].(string)
			en, _ := num(snap[i+1])
			dq, _ := num(snap[i+2])
			if en != d.Gen {
				continue
			}
			var seen int
			err := tx.GetContext(ctx, &seen, m.q.seenEntry, sku, id)
			if errors.Is(err, sql.ErrNoRows) {
				d.Unsynced += dq
				continue
			}
			if err != nil {
				return err
			}
		}
		if d.RedisMissing {
			// Everything granted, not sold (synced or in the journal) and
			// not lost before is lost with Redis's state; the warm-up
			// counts every grant as applied.
			// The holds Redis kept are lost with it too: their units count
			// as lost, no longer as held.
			d.Expected = d.Granted - (d.Sold - d.Returned) - d.Held - d.Unsynced - d.LostBefore
			d.Lost = max(d.Expected+d.Held, 0)
			if _, err := tx.ExecContext(ctx, m.q.lose, d.Lost, sku, d.Gen); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.q.unhold, sku, d.Gen); err != nil {
				return err
			}
			if _, err := m.warmWith(ctx, sku, d.Gen, last, d.Pool); err != nil {
				return err
			}
			return nil
		}
		d.Allotment, d.View, d.Applied = a, p, g
		// The grants Redis applied, and those it missed.
		var list []any
		applied := d.Granted
		rows, err := tx.QueryxContext(ctx, m.q.grantsAfter, sku, d.Gen, g)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, qty int64
			if err := rows.Scan(&id, &qty); err != nil {
				rows.Close()
				return err
			}
			applied -= qty
			list = append(list, id, qty)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		d.Expected = applied - (d.Sold - d.Returned) - d.Held - d.Unsynced - d.LostBefore
		switch {
		case a > d.Expected:
			d.Excess = a - d.Expected
		case a < d.Expected:
			d.Lost = d.Expected - a
		}
		// Repairs, while SQL's row is locked. Lost units are recorded, so
		// that later Reconciles count them as gone.
		if d.Lost > 0 {
			if _, err := tx.ExecContext(ctx, m.q.lose, d.Lost, sku, d.Gen); err != nil {
				return err
			}
		}
		if d.Excess > 0 {
			if _, _, err := excessScript.Run(ctx, m.rdb, 0, 0, []string{m.stateKey(sku)}, d.Gen, -d.Excess); err != nil && err != redis.Nil {
				return withCtx(ctx, err)
			}
		}
		if len(list) > 0 || p != d.Pool {
			args := append([]any{d.Gen, last, d.Pool}, list...)
			if _, _, err := applyScript.Run(ctx, m.rdb, 0, 0, []string{m.stateKey(sku)}, args...); err != nil {
				return withCtx(ctx, err)
			}
			d.GrantsApplied, d.ViewFixed = int64(len(list)/2), p != d.Pool
		}
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		return d, fmt.Errorf("tiered: reconcile %q: %w", sku, inventory.ErrNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("tiered: reconcile %q: %w", sku, err)
	}
	return d, nil
}
