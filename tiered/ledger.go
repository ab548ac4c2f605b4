package tiered

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/ledger"
)

// The movement ledger (WithLedger). Its rows live in SQL, in the table
// TABLEPREFIXmoves, written by three writers, each holding the SKU's stock
// row: Init's transaction (its init entry), the syncer's (the entries of
// the Redis moves a journal entry carries, in the transaction that applies
// the entry to SQL) and the fallback's (its own moves). On the Redis path
// the journal is the ledger's stream: the script that moves the stock
// writes the moves' records in the journal entry it appends anyway (field
// l, see holds.lua), so an entry exists if and only if its move took
// effect, and nothing else is written to Redis.
//
// The records carry the kind, the units, the key, the reference and the
// hold id; the time of a Redis move is its journal entry's id (Redis's
// clock, ms), that of the other rows the database's clock as they are
// written (lnowSQL). The
// stock after each entry is not taken from Redis: SQL counts it on from
// the SKU's last row, as it writes the rows, so that the moves of Redis and
// of the fallback, which sell from two disjoint stocks (Redis's allotment,
// SQL's pool), add up in one history whose replay is the stock.

// Heads of the Redis scripts: LEDGER is nil in the scripts of a Manager
// without a ledger, whose "if LEDGER" tests then all fail.
const (
	plainHead  = "local LEDGER\n"
	ledgerHead = "local LEDGER = true\n"
)

// scripts are the Redis scripts that move stock: those without a ledger,
// shared by every such Manager, or those with one.
type scripts struct{ move, batch, parts *rediskeys.Script }

var (
	plainScripts  = scripts{move: moveScript, batch: batchScript, parts: partsScript}
	ledgerScripts = scripts{
		move:  rediskeys.NewScript(ledgerHead + holdsLua + moveFile),
		batch: rediskeys.NewScript(ledgerHead + holdsLua + batchFile),
		parts: rediskeys.NewScript(ledgerHead + holdsLua + partsFile),
	}
)

// WithLedger makes the Manager keep a movement ledger (package
// [github.com/stockkit/inventory/ledger]): every move that took effect
// (Init, Reduce, Return, the lines calls, Reserve, Confirm, Cancel, and a
// hold released after its TTL) is recorded with the move, and the
// Manager's Entries reads it.
//
//   - On the Redis path, the script that moves the stock writes the
//     move's record (kind, units, key, reference, hold id) in the journal
//     entry it appends to the SKU's journal stream, under the SKU's hash
//     tag: no other stream, no other key. The syncer writes the records as
//     rows of the SQL table TABLEPREFIXmoves in the transaction that
//     applies the entry to SQL, and the entry leaves Redis once that has
//     committed (the journal's retention: until synced).
//   - The fallback, while Redis is unreachable, writes the rows of its
//     moves in its own transaction; Init in its own.
//   - Stock that changes without a call is recorded too, in the
//     transaction that changes it, with no key and the reason as its
//     reference: the units a recovery or [Manager.Reconcile] records lost
//     ([Drift].Lost: the holds Redis lost as [ledger.LostHeld], the rest
//     as [ledger.Lost]); the holds an Init drops ([ledger.LostHeld], before
//     its init entry); the units [WithKeyedFallback](true) gives back for
//     a key applied twice (a return, or a reduce for a Return's pair).
//
// The time of a Redis move is its journal entry's id (Redis's clock); of
// every other row, the database's clock as the row is written.
//
// A row's position is the table's auto-increment key, given when the row
// is written to SQL: a Redis move's at sync time. Each SKU's rows are
// written by transactions that hold its stock row, so positions grow
// along its history in the order its moves reached SQL, and the stock
// after each row is SQL's count carried on from the row before. A Redis
// move not yet synced has no row yet: Entries syncs the SKU's journal
// before it reads, so a reader sees every move acknowledged before the
// call, except while Redis is unreachable (then what SQL has). Rows are
// kept for good: delete old ones yourself.
//
// Create the table with [Manager.CreateTables]. Without WithLedger, the
// scripts, journal entries and SQL statements are those of before.
func WithLedger() Option { return func(c *config) { c.ledgerOn = true } }

// lrec is a ledger record as the journal carries it (holds.lua): four
// lines, "KIND UNITS", the key, the reference, the hold id.
func lrec(kind ledger.Kind, units int64, key, ref, hold string) string {
	return string(kind) + " " + strconv.FormatInt(units, 10) + "\n" + key + "\n" + ref + "\n" + hold
}

// moveRec returns the record of a Reduce or Return of qty units recorded
// with key, or "" without a ledger.
func (m *Manager) moveRec(ctx context.Context, dir driver.Direction, qty int64, key string) string {
	if !m.cfg.ledgerOn {
		return ""
	}
	kind := ledger.Reduce
	if dir == driver.DirReturn {
		kind = ledger.Return
	}
	return lrec(kind, qty, key, driver.Ref(ctx), "")
}

// holdArgs returns parts.lua's ledger argument of holding l under r: the
// reserve record of a hold (a lines call records its lines when it sells
// them), or nothing without a ledger.
func (m *Manager) holdArgs(ctx context.Context, r *record, qty int64) []any {
	if !m.cfg.ledgerOn {
		return nil
	}
	if r.kind != kindHold {
		return []any{""}
	}
	return []any{lrec(ledger.Reserve, qty, "", driver.Ref(ctx), r.id)}
}

// settleArgs returns parts.lua's ledger arguments of settling r's part by
// op (sell or release): a hold's confirm, or release (cancel or expire);
// a lines call's reduce when it sells, nothing when it releases (its
// lines were never recorded held).
func (m *Manager) settleArgs(ctx context.Context, r *record, op string, release ledger.Kind) []any {
	if !m.cfg.ledgerOn {
		return nil
	}
	ref := driver.Ref(ctx)
	switch {
	case r.kind == kindHold && op == "sell":
		return []any{string(ledger.Confirm), "\n" + ref + "\n" + r.id}
	case r.kind == kindHold:
		if release == ledger.Expire {
			ref = ""
		}
		return []any{string(release), "\n" + ref + "\n" + r.id}
	case op == "sell":
		key := ""
		if r.kind == kindKeyed {
			_, key, _ = strings.Cut(r.id, ":")
		}
		return []any{string(ledger.Reduce), key + "\n" + ref + "\n"}
	}
	return []any{"", ""}
}

// maxLedgerTx bounds the ledger records of one sync transaction (see
// applyEntries); an entry that holds more is applied alone.
const maxLedgerTx = 2048

// ledgerPart returns how many of msgs, at least one, hold up to
// maxLedgerTx ledger records together.
func ledgerPart(msgs []redis.XMessage) int {
	recs := 0
	for i, msg := range msgs {
		l, _ := msg.Values["l"].(string)
		if l != "" {
			recs += (strings.Count(l, "\n") + 1) / 4
		}
		if recs > maxLedgerTx && i > 0 {
			return i
		}
	}
	return len(msgs)
}

// lrow is a row of the ledger table about to be written.
type lrow struct {
	kind         ledger.Kind
	units        int64
	key, ref, hd string
	us           int64 // moved_at, Unix µs; 0: the database's clock as the row is written
}

// parseRecs appends to rows the records of a journal entry's l field.
func parseRecs(rows []lrow, l string, us int64) ([]lrow, error) {
	if l == "" {
		return rows, nil
	}
	lines := strings.Split(l, "\n")
	if len(lines)%4 != 0 {
		return rows, fmt.Errorf("ledger records of %d lines", len(lines))
	}
	for i := 0; i < len(lines); i += 4 {
		kind, units, ok := strings.Cut(lines[i], " ")
		n, err := strconv.ParseInt(units, 10, 64)
		if !ok || err != nil {
			return rows, fmt.Errorf("ledger record %q", lines[i])
		}
		rows = append(rows, lrow{ledger.Kind(kind), n, lines[i+1], lines[i+2], lines[i+3], us})
	}
	return rows, nil
}

// syncedRows returns the ledger records of fresh, the journal entries a
// sync applies, of generation gen, an entry's records together: a move of
// an older generation was undone by the Init that started gen, and is not
// recorded (SQL does not apply it either).
func syncedRows(fresh []syncEntry, gen int64) [][]lrow {
	var groups [][]lrow
	for _, e := range fresh {
		if e.gen == gen && len(e.rows) > 0 {
			groups = append(groups, e.rows)
		}
	}
	return groups
}

// ledgerHead reads, in tx (which holds the SKU's row), the SKU's
// generation and the stock after its last ledger record.
func (m *Manager) ledgerHead(ctx context.Context, tx *sqlx.Tx, sku string) (gen int64, st ledger.Stock, err error) {
	err = tx.QueryRowxContext(ctx, m.q.lhead, sku).Scan(&gen, &st.Available, &st.Held, &st.Sold)
	return gen, st, err
}

// Rows and positions: a row of the ledger table holds the records of one
// journal entry (a merged batch's calls on the SKU, or one move), of one
// fallback transaction, or an Init: up to rowRecs records, with the stock
// after its last. Record i (from 0) of the row at pos p has position
// p*rowRecs + i.
const rowRecs = 1024

// maxLedgerRows bounds the rows of one INSERT (7 placeholders each).
const maxLedgerRows = 256

// writeRows writes the groups of records of sku in tx, each as one row
// (or several, of up to rowRecs records), the stock after each counted on
// from st, up to maxLedgerRows rows per INSERT.
func (m *Manager) writeRows(ctx context.Context, tx *sqlx.Tx, sku string, st ledger.Stock, gs [][]lrow) error {
	var args []any
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, m.db.Rebind(m.q.linsert+strings.Repeat(m.q.lrow+", ", n-1)+m.q.lrow), args...)
		args, n = args[:0], 0
		return err
	}
	var b strings.Builder
	for _, g := range gs {
		for len(g) > 0 {
			part := g[:min(len(g), rowRecs)]
			g = g[len(part):]
			b.Reset()
			for i, r := range part {
				var err error
				if st, err = st.Apply(r.kind, r.units); err != nil {
					return err
				}
				if i > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(lrec(r.kind, r.units, r.key, r.ref, r.hd))
			}
			var us any // nil: the database's clock (lrow)
			if part[0].us != 0 {
				us = part[0].us
			}
			args = append(args, sku, len(part), st.Available, st.Held, st.Sold, b.String(), us)
			if n++; n == maxLedgerRows {
				if err := flush(); err != nil {
					return fmt.Errorf("ledger: %w", err)
				}
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// syncLedger writes the ledger rows of fresh in the sync's tx, then
// those of the units given back for pairs (giveBackRows); nothing without
// a ledger.
func (m *Manager) syncLedger(ctx context.Context, tx *sqlx.Tx, sku string, fresh []syncEntry, pairs []DoubleApply) error {
	if !m.cfg.ledgerOn {
		return nil
	}
	n := 0
	for _, e := range fresh {
		n += len(e.rows)
	}
	back := giveBackRows(pairs)
	if n == 0 && len(back) == 0 {
		return nil
	}
	gen, st, err := m.ledgerHead(ctx, tx, sku)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	gs := syncedRows(fresh, gen)
	if len(back) > 0 {
		gs = append(gs, back)
	}
	return m.writeRows(ctx, tx, sku, st, gs)
}

// giveBackRows returns the ledger records of the units given back for
// pairs (WithKeyedFallback(true)): a Reduce applied twice gives its units
// back as a return would, a Return applied twice takes them back out as a
// reduce would, each with no key (no call made it) and the reason as its
// reference.
func giveBackRows(pairs []DoubleApply) []lrow {
	var rows []lrow
	for _, p := range pairs {
		if p.GivenBack == 0 {
			continue
		}
		kind := ledger.Return
		if p.Dir == driver.DirReturn {
			kind = ledger.Reduce
		}
		ref := "tiered: given back: key " + p.Key + " applied twice (journal entry " + p.Entry + ")"
		rows = append(rows, lrow{kind: kind, units: p.GivenBack, ref: ref})
	}
	return rows
}

// initLedger writes in Init's tx the init row of an Init of qty, after a
// lost-held row of the units the ledger counts held: Init drops the
// SKU's holds (Redis's state of the older generation goes, and SQL's held
// count with it).
func (m *Manager) initLedger(ctx context.Context, tx *sqlx.Tx, sku string, qty int64) error {
	_, st, err := m.ledgerHead(ctx, tx, sku)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	gs := [][]lrow{{{kind: ledger.Init, units: qty, ref: driver.Ref(ctx)}}}
	if st.Held > 0 {
		gs = append([][]lrow{{{kind: ledger.LostHeld, units: st.Held, ref: "tiered: holds dropped by Init"}}}, gs...)
	}
	return m.writeRows(ctx, tx, sku, st, gs)
}

// writeOff writes in tx, which recorded the loss of lost units of sku
// (Reconcile, the recovery), their write-off rows: the held units the
// ledger counts first, when the holds went too (held), then the rest as
// lost from the stock on sale, each with the reason why.
func (m *Manager) writeOff(ctx context.Context, tx *sqlx.Tx, sku string, lost int64, held bool, why string) error {
	if !m.cfg.ledgerOn || lost <= 0 {
		return nil
	}
	_, st, err := m.ledgerHead(ctx, tx, sku)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	var rows []lrow
	if h := st.Held; held && h > 0 {
		rows = append(rows, lrow{kind: ledger.LostHeld, units: h, ref: why})
		lost -= h
	}
	if lost > 0 {
		rows = append(rows, lrow{kind: ledger.Lost, units: lost, ref: why})
	}
	return m.writeRows(ctx, tx, sku, st, [][]lrow{rows})
}

// readPage reads the records of sku after position after, up to limit:
// from the row that holds after on, limit+1 rows at most (each row past
// the first holds at least one record past after).
func (m *Manager) readPage(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	rows, err := m.db.QueryxContext(ctx, m.q.lpage, sku, after/rowRecs, limit+1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]ledger.Entry, 0, min(limit, 64))
	for rows.Next() && len(out) < limit {
		var pos, n, us int64
		var st ledger.Stock
		var recs string
		if err := rows.Scan(&pos, &n, &st.Available, &st.Held, &st.Sold, &recs, &us); err != nil {
			return nil, err
		}
		es, err := rowEntries(sku, pos, st, recs, us)
		if err != nil || int64(len(es)) != n {
			return nil, fmt.Errorf("row %d: %d records of %d (%v)", pos, len(es), n, err)
		}
		for _, e := range es {
			if e.Pos > after && len(out) < limit {
				out = append(out, e)
			}
		}
	}
	return out, rows.Err()
}

// rowEntries returns the entries of the ledger row at pos: its records,
// each with its position and the stock after it, worked back from st, the
// stock after the last (an Init is alone in its row).
func rowEntries(sku string, pos int64, st ledger.Stock, recs string, us int64) ([]ledger.Entry, error) {
	rs, err := parseRecs(nil, recs, us)
	if err != nil {
		return nil, err
	}
	es := make([]ledger.Entry, len(rs))
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		es[i] = ledger.Entry{SKU: sku, Pos: pos*rowRecs + int64(i), Kind: r.kind, Units: r.units, After: st,
			Key: r.key, Ref: r.ref, Hold: r.hd, Time: time.UnixMicro(us)}
		if i > 0 {
			d, err := ledger.Stock{}.Apply(r.kind, r.units)
			if err != nil || r.kind == ledger.Init {
				return nil, fmt.Errorf("record %d: %s (%v)", i, r.kind, err)
			}
			st = ledger.Stock{Available: st.Available - d.Available, Held: st.Held - d.Held, Sold: st.Sold - d.Sold}
		}
	}
	return es, nil
}
