package tiered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

// Sync applies to SQL every journal entry it can read now, on every SKU of
// the SKU table, and returns how many entries it applied (entries already in
// the ledger are acknowledged, not counted). Each entry is applied once: its
// id enters the ledger in the transaction that adds its units to the SKU's
// synced sales, and it is acknowledged and deleted from the journal only
// after that commits. Entries that another syncer read and left
// unacknowledged for the claim-idle time ([WithClaimIdle]) are taken over.
// Several syncers may run at once, in one process or many.
func (m *Manager) Sync(ctx context.Context) (int, error) {
	var skus []string
	if err := m.db.SelectContext(ctx, &skus, m.q.skus); err != nil {
		return 0, fmt.Errorf("tiered: sync: list SKUs: %w", err)
	}
	return sumEach(ctx, skus, m.syncSKU)
}

// syncSKU applies the journal of one SKU: entries of dead syncers, then
// this syncer's own unacknowledged entries, then new ones; then it prunes
// the ledger up to the last entry acknowledged.
func (m *Manager) syncSKU(ctx context.Context, sku string) (int, error) {
	stream := m.journalKey(sku)
	total, last, err := m.syncClaimed(ctx, sku, stream)
	if err != nil || total < 0 {
		return max(total, 0), err
	}
	for _, start := range []string{"0", ">"} {
		n, id, err := m.syncRead(ctx, sku, stream, start)
		total += n
		if err != nil {
			return total, err
		}
		if id != "" {
			last = id
		}
	}
	if last != "" && !m.ledger.off {
		if _, err := m.prune(ctx, sku, stream, last); err != nil {
			return total, err
		}
	}
	return total, nil
}

// syncClaimed takes over and applies the entries of sku's journal that
// another syncer read and left unacknowledged for the claim-idle time. It
// returns how many it applied and the last one's id; -1 when the journal
// has no consumer group (Redis has no state for the SKU).
func (m *Manager) syncClaimed(ctx context.Context, sku, stream string) (int, string, error) {
	claimed, _, err := m.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: stream, Group: group, Consumer: m.consumer, MinIdle: m.cfg.claimIdle, Start: "0-0", Count: m.cfg.syncBatch,
	}).Result()
	if noGroup(err) {
		return -1, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("tiered: sync %q: claim: %w", sku, err)
	}
	if len(claimed) == 0 {
		return 0, "", nil
	}
	n, err := m.applyEntries(ctx, sku, stream, claimed)
	if err != nil {
		return n, "", err
	}
	return n, claimed[len(claimed)-1].ID, nil
}

// syncRead applies, a batch at a time, the entries of sku's journal that
// XREADGROUP returns from start ("0": this syncer's pending entries, ">":
// new ones), until it returns fewer than a batch. It returns how many it
// applied and the last one's id.
func (m *Manager) syncRead(ctx context.Context, sku, stream, start string) (int, string, error) {
	total, last := 0, ""
	for {
		res, err := m.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: m.consumer, Streams: []string{stream, start}, Count: m.cfg.syncBatch, Block: -1,
		}).Result()
		if err == redis.Nil || noGroup(err) {
			return total, last, nil
		}
		if err != nil {
			return total, last, fmt.Errorf("tiered: sync %q: read journal: %w", sku, err)
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			return total, last, nil
		}
		msgs := res[0].Messages
		n, err := m.applyEntries(ctx, sku, stream, msgs)
		total += n
		if err != nil {
			return total, last, err
		}
		last = msgs[len(msgs)-1].ID
		if int64(len(msgs)) < m.cfg.syncBatch {
			return total, last, nil
		}
	}
}

func noGroup(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOGROUP") }

// syncEntry is a journal entry the syncer applies.
type syncEntry struct {
	id      string
	ms, gen int64
	mv      entryMove
	keys    []keyMove
	rows    []lrow // with a ledger: the records of its moves (ledger.go)
}

// applyEntries applies msgs of sku a transaction at a time (applyPart):
// all in one, or, with a ledger, a part of about maxLedgerTx records each,
// so that a grant of the SKU, which waits for its row, never waits for
// tens of thousands of ledger rows.
func (m *Manager) applyEntries(ctx context.Context, sku, stream string, msgs []redis.XMessage) (int, error) {
	total := 0
	for len(msgs) > 0 {
		n := len(msgs)
		if m.cfg.ledgerOn {
			n = ledgerPart(msgs)
		}
		k, err := m.applyPart(ctx, sku, stream, msgs[:n])
		total += k
		if err != nil {
			return total, err
		}
		msgs = msgs[n:]
	}
	return total, nil
}

// applyPart applies msgs of sku in one transaction (applyTx), then
// acknowledges and deletes them in one MULTI.
func (m *Manager) applyPart(ctx context.Context, sku, stream string, msgs []redis.XMessage) (int, error) {
	var fresh []syncEntry
	var pairs []DoubleApply
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		fresh, pairs, err = m.applyTx(ctx, tx, sku, msgs)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("tiered: sync %q: apply journal: %w", sku, err)
	}
	m.reportPairs(pairs)
	if m.applied != nil {
		var sold, returned int64
		for _, e := range fresh {
			sold += e.mv.sold
			returned += e.mv.returned
		}
		m.applied(sold, returned)
	}
	if m.beforeAck != nil {
		if err := m.beforeAck(); err != nil {
			return len(fresh), err
		}
	}
	ids := make([]string, len(msgs))
	for i, msg := range msgs {
		ids[i] = msg.ID
	}
	if _, err := m.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, stream, group, ids...)
		p.XDel(ctx, stream, ids...)
		return nil
	}); err != nil {
		return len(fresh), fmt.Errorf("tiered: sync %q: acknowledge: %w", sku, err)
	}
	return len(fresh), nil
}

// applyTx applies in tx the entries of msgs that the ledger does not hold
// and returns them, with the keys they applied twice (syncKeys). It locks
// the SKU's row first (the prune mark), as every writer of the SKU's
// ledger does, then reads which of the entries the ledger holds and
// records the others with one statement each: it holds the row, which
// grants wait for, a few round trips whatever the number of entries.
func (m *Manager) applyTx(ctx context.Context, tx *sqlx.Tx, sku string, msgs []redis.XMessage) ([]syncEntry, []DoubleApply, error) {
	// The prune mark, read with the SKU's row locked, as the pruner
	// does: an entry below it was applied and its ledger row pruned.
	var mark int64
	if err := tx.QueryRowxContext(ctx, m.q.mark, sku).Scan(&mark); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, nil, err
	}
	fresh, err := m.readEntries(sku, msgs, mark)
	if err != nil {
		return nil, nil, err
	}
	if fresh, err = m.unseen(ctx, tx, sku, fresh); err != nil || len(fresh) == 0 {
		return nil, nil, err
	}
	pairs, err := m.syncKeys(ctx, tx, sku, fresh)
	if err != nil {
		return nil, nil, err
	}
	if err := m.syncLedger(ctx, tx, sku, fresh, pairs); err != nil {
		return nil, nil, err
	}
	byGen := map[int64]*entryMove{}
	for _, e := range fresh {
		mv := byGen[e.gen]
		if mv == nil {
			mv = &entryMove{}
			byGen[e.gen] = mv
		}
		mv.sold += e.mv.sold
		mv.returned += e.mv.returned
		mv.held += e.mv.held
	}
	for gen, mv := range byGen {
		// An entry of an older generation (before an Init) changes nothing.
		if _, err := tx.ExecContext(ctx, m.q.apply, mv.sold, mv.returned, mv.held, sku, gen); err != nil {
			return nil, nil, err
		}
	}
	return fresh, pairs, nil
}

// readEntries parses msgs, leaving out those deleted while pending and
// those below the prune mark (applied before, their ledger rows pruned).
func (m *Manager) readEntries(sku string, msgs []redis.XMessage, mark int64) ([]syncEntry, error) {
	var fresh []syncEntry
	for _, msg := range msgs {
		if len(msg.Values) == 0 {
			continue // deleted while pending: applied and acknowledged before
		}
		gen, mv, err := entryMoves(msg.Values)
		ms, err2 := entryMS(msg.ID)
		keys, err3 := entryKeys(msg.Values)
		l, _ := msg.Values["l"].(string)
		rows, err4 := parseRecs(nil, l, ms*1000)
		if err := errors.Join(err, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("journal entry %s of %q is malformed: %v (%w)", msg.ID, sku, msg.Values, err)
		}
		if ms < mark {
			m.ledger.belowMark.Add(1)
			continue
		}
		fresh = append(fresh, syncEntry{msg.ID, ms, gen, mv, keys, rows})
	}
	return fresh, nil
}

// unseen records fresh in the ledger and returns those it did not hold
// (those it held were applied before).
func (m *Manager) unseen(ctx context.Context, tx *sqlx.Tx, sku string, fresh []syncEntry) ([]syncEntry, error) {
	if len(fresh) == 0 {
		return nil, nil
	}
	args := []any{sku}
	for _, e := range fresh {
		args = append(args, e.id)
	}
	var seen []string
	if err := tx.SelectContext(ctx, &seen, m.db.Rebind(m.q.seen+groups(len(fresh), 1)), args...); err != nil {
		return nil, err
	}
	fresh = slices.DeleteFunc(fresh, func(e syncEntry) bool { return slices.Contains(seen, e.id) })
	if len(fresh) == 0 {
		return nil, nil
	}
	args = args[:0]
	for _, e := range fresh {
		args = append(args, sku, e.id, e.ms)
	}
	res, err := tx.ExecContext(ctx, m.db.Rebind(m.q.record+groups(len(fresh), 3)+m.q.recordEnd), args...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(fresh)) {
		// Another writer recorded some meanwhile, which the row lock
		// rules out: which ones is unknown, so apply none.
		return nil, fmt.Errorf("ledger recorded %d of %d new entries (%v)", n, len(fresh), err)
	}
	return fresh, nil
}

// entryMoves reads a journal entry's fields: its generation (n), and the
// units its moves sold, returned and held. A batch's entry (batch.lua)
// holds the net units taken (d) and the units sold (s); a lone move's
// (move.lua), d alone: sold when positive, returned when negative; an
// entry of holds (holds.lua, parts.lua) d, s and the change of held units
// (h), so that returned == s + h - d.
func entryMoves(v map[string]any) (gen int64, mv entryMove, err error) {
	num := func(f string) (int64, error) {
		s, ok := v[f].(string)
		if !ok {
			return 0, fmt.Errorf("field %s missing", f)
		}
		return strconv.ParseInt(s, 10, 64)
	}
	gen, err1 := num("n")
	d, err2 := num("d")
	if err = errors.Join(err1, err2); err != nil {
		return 0, mv, err
	}
	if _, ok := v["s"]; !ok {
		if d > 0 {
			return gen, entryMove{sold: d}, nil
		}
		return gen, entryMove{returned: -d}, nil
	}
	if mv.sold, err = num("s"); err != nil {
		return 0, mv, err
	}
	if _, ok := v["h"]; ok {
		if mv.held, err = num("h"); err != nil {
			return 0, mv, err
		}
	}
	if mv.returned = mv.sold + mv.held - d; mv.sold < 0 || mv.returned < 0 {
		return 0, mv, fmt.Errorf("sold %d, held %d, net %d", mv.sold, mv.held, d)
	}
	return gen, mv, nil
}

// entryMove is what one journal entry moved.
type entryMove struct{ sold, returned, held int64 }

// Lag returns how many journal entries, over every SKU, SQL has not
// acknowledged yet.
func (m *Manager) Lag(ctx context.Context) (int64, error) {
	var skus []string
	if err := m.db.SelectContext(ctx, &skus, m.q.skus); err != nil {
		return 0, fmt.Errorf("tiered: lag: list SKUs: %w", err)
	}
	var total int64
	for _, sku := range skus {
		n, err := m.rdb.XLen(ctx, m.journalKey(sku)).Result()
		if err != nil {
			return total, fmt.Errorf("tiered: lag of %q: %w", sku, err)
		}
		total += n
	}
	return total, nil
}

// Drain waits for the grants this process has in flight (a background
// refill records its grant in SQL before Redis applies it), then syncs
// until SQL has every journal entry Redis holds, and returns nil then, or
// ctx's error. Moves made while it runs may be included.
func (m *Manager) Drain(ctx context.Context) error {
	m.mu.Lock()
	flights := make([]chan struct{}, 0, len(m.flights))
	for _, done := range m.flights {
		flights = append(flights, done)
	}
	m.mu.Unlock()
	for _, done := range flights {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("tiered: drain: waiting for a grant: %w", ctx.Err())
		}
	}
	for {
		if _, err := m.Sync(ctx); err != nil {
			return err
		}
		lag, err := m.Lag(ctx)
		if err != nil {
			return err
		}
		if lag == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tiered: drain: %d entries left: %w", lag, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Run syncs until ctx is done, then returns ctx's error, waiting the sync
// interval ([WithSyncInterval]) between syncs: each sync reads every SKU's
// journal to its end, so the moves of the interval go to SQL together, a
// few transactions per SKU, and an idle or lightly used SKU costs a few
// reads per interval, not a loop of them. A failed sync's error goes to
// [WithSyncErrors]'s function; Run carries on.
func (m *Manager) Run(ctx context.Context) error {
	for {
		if _, err := m.Sync(ctx); err != nil && ctx.Err() == nil && m.cfg.onSyncErr != nil {
			m.cfg.onSyncErr(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(m.cfg.syncInterval):
		}
	}
}
