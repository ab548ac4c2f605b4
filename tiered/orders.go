package tiered

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/ledger"
)

var (
	//go:embed parts.lua
	partsFile string
	//go:embed record.lua
	recordLua string

	partsScript  = rediskeys.NewScript(plainHead + holdsLua + partsFile)
	recordScript = rediskeys.NewScript(recordLua)
)

// Bounds of the order protocol (see the package documentation, Orders).
const (
	// LinesTTL is how long a ReduceLines may take before its held lines
	// expire: a call that died midway gives its units back after it.
	LinesTTL = 10 * time.Second
	// PinGrace is how long after a hold's TTL a line pinned by a Confirm
	// that has not finished waits before Sweep settles it by the hold's
	// record: sold if the record says confirmed, released otherwise.
	PinGrace = 5 * time.Second
	// SweepBatch is how many SKUs of one sweep index Sweep visits per
	// round; it runs rounds until none is due.
	SweepBatch = 100
)

// Record kinds: a hold (Reserve), a keyed lines call (its direction in
// the id), an unkeyed ReduceLines (a random id).
const (
	kindHold    = "h"
	kindKeyed   = "k"
	kindUnkeyed = "r"
)

// Record states.
const (
	stReserving = "reserving"
	stHeld      = "held"
	stConfirmed = "confirmed"
	stReleased  = "released"
)

// orders is the order half of a Manager's front.Backend.
type orders struct{ m *Manager }

// record is one incarnation of an order's record.
type record struct {
	key, kind, id, nonce string
	st                   string
	deadline             int64
	lines                []inventory.Line
}

// field is the name of the record's part in the state hash of each SKU.
func (r *record) field() string { return "P:" + r.nonce + ":" + r.kind + ":" + r.id }

func (m *Manager) newRecord(kind, id string) *record {
	return &record{key: rediskeys.Order(m.cfg.prefix, kind, id), kind: kind, id: id, nonce: rediskeys.NewNonce()}
}

// strs reads a script's array reply of strings and integers as strings.
func strs(v any) ([]string, error) {
	return replyOf(v, func(x any) (string, bool) {
		switch x := x.(type) {
		case string:
			return x, true
		case int64:
			return strconv.FormatInt(x, 10), true
		}
		return "", false
	})
}

// recordOp runs record.lua's op on r.
func (m *Manager) recordOp(ctx context.Context, r *record, args ...any) ([]string, error) {
	cmd, _, err := recordScript.Run(ctx, m.rdb, 0, 0, []string{r.key}, args...)
	m.result(ctx, err)
	if err != nil {
		return nil, withCtx(ctx, err)
	}
	return strs(cmd.Val())
}

// begin creates r's record, in state reserving, with the deadline ttl from
// now on the Redis clock. It returns ok false, and r filled from the
// record found, when the record exists.
func (m *Manager) begin(ctx context.Context, r *record, lines []inventory.Line, ttl time.Duration) (ok bool, err error) {
	life := ttl + PinGrace + m.cfg.keyTTL
	res, err := m.recordOp(ctx, r, "begin", r.nonce, ttl.Milliseconds(), life.Milliseconds(), rediskeys.EncodeLines(lines))
	if err != nil {
		return false, err
	}
	if res[0] == "ok" && len(res) == 2 {
		r.st, r.lines = stReserving, lines
		r.deadline, err = strconv.ParseInt(res[1], 10, 64)
		return true, err
	}
	return false, r.fill(res)
}

// fill sets r from a {'dup'|'ok', st, nonce, deadline, lines} reply.
func (r *record) fill(res []string) error {
	if len(res) != 5 {
		return fmt.Errorf("unexpected record reply %q", res)
	}
	r.st, r.nonce = res[1], res[2]
	var err error
	if r.deadline, err = strconv.ParseInt(res[3], 10, 64); err != nil {
		return fmt.Errorf("record deadline %q: %w", res[3], err)
	}
	r.lines, err = rediskeys.DecodeLines(res[4])
	return err
}

// load reads r's record; found is false when there is none.
func (m *Manager) load(ctx context.Context, r *record) (found bool, err error) {
	res, err := m.recordOp(ctx, r, "get")
	if err != nil || res[0] == "none" {
		return false, err
	}
	return true, r.fill(res)
}

// to moves r's record from one of the states from to state to, keeping it
// keep longer (0: as it was). It returns the state it found ("" when the
// record is gone) and whether it moved.
func (m *Manager) to(ctx context.Context, r *record, from []string, to string, keep time.Duration) (string, bool, error) {
	res, err := m.recordOp(ctx, r, "to", r.nonce, strings.Join(from, ","), to, keep.Milliseconds())
	if err != nil {
		return "", false, err
	}
	if res[0] == "none" {
		return "", false, nil
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("unexpected record reply %q", res)
	}
	return res[1], res[0] == "ok", nil
}

// drop deletes r's record (a call that failed, or an unkeyed call done).
func (m *Manager) drop(ctx context.Context, r *record) error {
	_, err := m.recordOp(ctx, r, "drop", r.nonce)
	return err
}

// sweepIndex is the sorted set Sweep reads for the SKUs of sku's slot.
func (m *Manager) sweepIndex(sku string) string {
	if m.cluster() {
		return rediskeys.SlotSweepIndex(m.cfg.prefix, rediskeys.Slot(sku))
	}
	return rediskeys.SweepIndex(m.cfg.prefix)
}

func (m *Manager) cluster() bool {
	_, ok := m.rdb.(*redis.ClusterClient)
	return ok
}

// part runs parts.lua's op on sku's part field.
func (m *Manager) part(ctx context.Context, sku, op, field string, args ...any) ([]int64, error) {
	keys := []string{m.stateKey(sku), m.journalKey(sku), m.sweepIndex(sku)}
	cmd, _, err := m.sc.parts.Run(ctx, m.rdb, 0, 0, keys, append([]any{op, field}, args...)...)
	m.result(ctx, err)
	if err != nil {
		return nil, withCtx(ctx, err)
	}
	if op == "sweep" {
		return nil, nil // read by sweepSKU
	}
	return ints(cmd.Val())
}

// Script codes of parts.lua beside move.lua's.
const (
	codeExists = 6
	codeGone   = 7
)

// holdLine holds line l under r's part until its deadline, granting from
// SQL or warming up as a Reduce does.
func (m *Manager) holdLine(ctx context.Context, l inventory.Line, rc *record) error {
	if m.cluster() { // Sweep visits the sweep index of the slots named here
		err := m.rdb.ZAdd(ctx, rediskeys.SweepSlots(m.cfg.prefix), redis.Z{Member: rediskeys.Slot(l.SKU)}).Err()
		if err != nil {
			return fmt.Errorf("hold %q: %w", l.SKU, withCtx(ctx, err))
		}
	}
	stalled := false
	for range m.cfg.attempts {
		args := append([]any{l.Qty, rc.deadline, m.cfg.lowWater, m.cfg.refillTO.Milliseconds(), l.SKU}, m.holdArgs(ctx, rc, l.Qty)...)
		r, err := m.part(ctx, l.SKU, "hold", rc.field(), args...)
		if err != nil {
			return fmt.Errorf("hold %q: %w", l.SKU, err)
		}
		switch r[0] {
		case codeMoved:
			if len(r) == 4 && r[2] == 1 {
				m.refill(l.SKU, r[3])
			}
			return nil
		case codeExists:
			return nil
		case codeRefused:
			return &inventory.InsufficientError{Short: []inventory.Shortfall{{Line: l, Available: r[1]}}}
		case codeShort:
			if err := m.topUp(ctx, l.SKU, codeShort, l.Qty-r[2], r[1], &stalled); err != nil {
				return err
			}
		case codeNoState:
			if err := m.warm(ctx, l.SKU); err != nil {
				return err
			}
		default:
			return fmt.Errorf("hold %q: script replied %v", l.SKU, r)
		}
	}
	return fmt.Errorf("hold %q: %w: allotment short after %d attempts", l.SKU, inventory.ErrContention, m.cfg.attempts)
}

// holdAll holds every line of r until its deadline; on a failure it gives
// back the lines it held and deletes the record, so that the call leaves
// nothing behind.
func (m *Manager) holdAll(ctx context.Context, r *record) error {
	for i, l := range r.lines {
		if err := m.holdLine(ctx, l, r); err != nil {
			undo := *r
			undo.lines = r.lines[:i+1] // the failed line's hold may have taken effect
			m.abandon(ctx, &undo)
			return err
		}
	}
	return nil
}

// abandon releases r's parts and deletes its record, past the caller's
// ctx: what it leaves, the parts' deadline releases.
func (m *Manager) abandon(ctx context.Context, r *record) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.refillTO)
	defer cancel()
	m.releaseParts(ctx, r)
	_ = m.drop(ctx, r)
}

// releaseParts releases r's parts, recorded as expired, past the caller's
// ctx (bounded by the refill timeout): what it leaves, the parts'
// deadline releases.
func (m *Manager) releaseParts(ctx context.Context, r *record) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.refillTO)
	defer cancel()
	_ = m.settle(ctx, r, "release", ledger.Expire)
}

// settle sells or releases (op) every part of r; a part gone was settled
// before. A hold's part released is recorded in the ledger as release
// (Cancel or Expire).
func (m *Manager) settle(ctx context.Context, r *record, op string, release ledger.Kind) error {
	var errs []error
	args := m.settleArgs(ctx, r, op, release)
	for _, l := range r.lines {
		if _, err := m.part(ctx, l.SKU, op, r.field(), args...); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", op, l.SKU, err))
		}
	}
	return errors.Join(errs...)
}

// pinAll pins every part of r, so that none expires by itself; gone is
// true when one had expired (or was settled) first.
func (m *Manager) pinAll(ctx context.Context, r *record) (gone bool, err error) {
	for _, l := range r.lines {
		res, err := m.part(ctx, l.SKU, "pin", r.field())
		if err != nil {
			return false, fmt.Errorf("pin %q: %w", l.SKU, err)
		}
		if res[0] == codeGone {
			return true, nil
		}
	}
	return false, nil
}

// refused reports an order call while the circuit to Redis is open.
func (m *Manager) refused() error {
	if m.br.open() {
		return fmt.Errorf("%w (%w): orders need Redis", ErrRedisUnreachable, ErrFallback)
	}
	return nil
}

// Reserve implements the backend of [inventory.OrderManager.Reserve].
func (o orders) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	m := o.m
	if err := m.refused(); err != nil {
		return err
	}
	r := m.newRecord(kindHold, id)
	ok, err := m.begin(ctx, r, lines, ttl)
	if err != nil {
		return err
	}
	if !ok {
		if r.st != stReserving || !slices.Equal(r.lines, lines) {
			return fmt.Errorf("%w: hold %q exists (%s)", inventory.ErrDuplicate, id, r.st)
		}
		// An earlier Reserve of id, cut by a fault or still running,
		// left its record unfinished: this call takes it over.
		if err := m.retake(ctx, r, ttl); err != nil {
			return err
		}
	}
	if err := m.holdAll(ctx, r); err != nil {
		return err
	}
	st, moved, err := m.to(ctx, r, []string{stReserving}, stHeld, 0)
	if err != nil {
		return err // a retry takes the record over, or finds it held
	}
	if !moved { // taken over by a retry, or cancelled: give back what this call held
		m.releaseParts(ctx, r)
		return fmt.Errorf("%w: hold %q was %s while it was being made", inventory.ErrContention, id, orGone(st))
	}
	return nil
}

// retake takes over r, a record that an earlier Reserve of the same hold
// left reserving (that call was cut by a fault, or still runs). The
// record becomes a new incarnation of r, with a new nonce and a deadline
// ttl from now, so that the earlier call's steps, which name the old
// nonce, fail (and it gives back what it held); then retake gives back
// the old incarnation's parts, recorded as expired. A part it cannot give
// back is released at its deadline, as every part is, and a part the
// earlier call holds after this is its own to give back, or released so.
func (m *Manager) retake(ctx context.Context, r *record, ttl time.Duration) error {
	old := *r
	r.nonce = rediskeys.NewNonce()
	life := ttl + PinGrace + m.cfg.keyTTL
	res, err := m.recordOp(ctx, r, "retake", old.nonce, r.nonce, ttl.Milliseconds(), life.Milliseconds())
	switch {
	case err != nil:
		return err
	case res[0] == "none":
		return fmt.Errorf("%w: an earlier Reserve of hold %q gave it up meanwhile", inventory.ErrContention, r.id)
	case len(res) != 2:
		return fmt.Errorf("unexpected record reply %q", res)
	case res[0] == "no":
		return fmt.Errorf("%w: hold %q exists (%s)", inventory.ErrDuplicate, r.id, res[1])
	}
	r.st = stReserving
	if r.deadline, err = strconv.ParseInt(res[1], 10, 64); err != nil {
		return err
	}
	return m.settle(ctx, &old, "release", ledger.Expire)
}

func orGone(st string) string {
	if st == "" {
		return "deleted"
	}
	return st
}

// loadHold reads the record of hold id for Confirm and Cancel: refused
// while Redis is unreachable, ErrHoldNotFound when there is none.
func (m *Manager) loadHold(ctx context.Context, id string) (*record, error) {
	if err := m.refused(); err != nil {
		return nil, err
	}
	r := m.newRecord(kindHold, id)
	found, err := m.load(ctx, r)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, inventory.ErrHoldNotFound
	}
	return r, nil
}

// Confirm implements the backend of [inventory.OrderManager.Confirm].
func (o orders) Confirm(ctx context.Context, id string) error {
	m := o.m
	r, err := m.loadHold(ctx, id)
	if err != nil {
		return err
	}
	switch r.st {
	case stConfirmed:
		return fmt.Errorf("%w: hold %q is confirmed", inventory.ErrDuplicate, id)
	case stReleased:
		return inventory.ErrHoldReleased
	case stReserving:
		return m.lapse(ctx, r)
	}
	return m.commit(ctx, r, []string{stHeld})
}

// lapse answers a Confirm of r, a record a Reserve has not finished: once
// its deadline has passed, the hold ran out before it was made (the
// Reserve was cut by a fault and not retried), and the record is moved to
// released and its parts given back; before, the Reserve may still run.
func (m *Manager) lapse(ctx context.Context, r *record) error {
	res, err := m.recordOp(ctx, r, "to", r.nonce, stReserving, stReleased, m.cfg.keyTTL.Milliseconds(), "1")
	if err != nil {
		return err
	}
	if res[0] != "ok" {
		return fmt.Errorf("%w: hold %q is still being made", inventory.ErrContention, r.id)
	}
	if err := m.settle(ctx, r, "release", ledger.Expire); err != nil {
		return err
	}
	return inventory.ErrHoldReleased
}

// commit confirms r, from one of the states from: it pins every part, then
// moves the record to confirmed, then sells the parts. Of a Confirm and
// the hold's expiry, the first to reach a part wins: a part pinned no
// longer expires, and a part expired cannot be pinned. A Cancel moves the
// record first, so the commit finds it released and gives the parts back.
func (m *Manager) commit(ctx context.Context, r *record, from []string) error {
	gone, err := m.pinAll(ctx, r)
	if err != nil {
		return err // pinned parts: Sweep settles them by the record after PinGrace
	}
	if gone {
		st, _, err := m.to(ctx, r, from, stReleased, m.cfg.keyTTL)
		if err != nil {
			return err
		}
		if st == stConfirmed {
			return fmt.Errorf("%w: hold %q is confirmed", inventory.ErrDuplicate, r.id)
		}
		if err := m.settle(ctx, r, "release", ledger.Expire); err != nil {
			return err
		}
		return inventory.ErrHoldReleased
	}
	st, moved, err := m.to(ctx, r, from, stConfirmed, m.cfg.keyTTL)
	if err != nil {
		return err
	}
	switch {
	case moved:
		return m.settle(ctx, r, "sell", "") // on failure Sweep sells them
	case st == stConfirmed:
		return fmt.Errorf("%w: hold %q is confirmed", inventory.ErrDuplicate, r.id)
	}
	if err := m.settle(ctx, r, "release", ledger.Expire); err != nil {
		return err
	}
	return inventory.ErrHoldReleased
}

// Cancel implements the backend of [inventory.OrderManager.Cancel].
func (o orders) Cancel(ctx context.Context, id string) error {
	m := o.m
	r, err := m.loadHold(ctx, id)
	if err != nil {
		return err
	}
	for range m.cfg.attempts {
		st, _, err := m.to(ctx, r, []string{stHeld, stReserving}, stReleased, m.cfg.keyTTL)
		if err != nil {
			return err
		}
		if st == stConfirmed {
			return inventory.ErrHoldConfirmed
		}
		if err := m.settle(ctx, r, "release", ledger.Cancel); err != nil || st != "" {
			return err
		}
		// The incarnation read is gone: deleted (its Reserve failed),
		// or taken over by a retry of its Reserve, which the next round
		// cancels.
		r = m.newRecord(kindHold, id)
		if found, err := m.load(ctx, r); err != nil || !found {
			return err
		}
	}
	return fmt.Errorf("%w: hold %q was taken over %d times while being cancelled", inventory.ErrContention, id, m.cfg.attempts)
}

// Held implements the backend of [inventory.OrderManager.Held]: the units
// of sku in holds Redis has not released yet. While the circuit is open,
// the units SQL knows held (synced).
func (o orders) Held(ctx context.Context, sku string) (int64, error) {
	m := o.m
	if m.br.open() {
		var held, gen int64
		if err := m.db.QueryRowxContext(ctx, m.q.held, sku).Scan(&held, &gen); err != nil {
			return 0, notFound(sku, err)
		}
		return held, nil
	}
	for range 2 {
		v, err := m.rdb.HMGet(ctx, m.stateKey(sku), "n", "h").Result()
		m.result(ctx, err)
		if err != nil {
			return 0, withCtx(ctx, err)
		}
		if v[0] != nil {
			if v[1] == nil {
				return 0, nil
			}
			return strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		}
		if err := m.warm(ctx, sku); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: Redis state vanished twice", inventory.ErrContention)
}

// notFound turns sql.ErrNoRows into inventory.ErrNotFound.
func notFound(sku string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%q: %w", sku, inventory.ErrNotFound)
	}
	return err
}

// MoveLines implements the backend of ReduceLines and ReturnLines.
func (o orders) MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error {
	m := o.m
	if err := m.refused(); err != nil {
		return err
	}
	if dir == driver.DirReturn {
		return m.returnLines(ctx, lines, key)
	}
	if key == "" && len(lines) == 1 {
		n, err := m.move(ctx, lines[0].SKU, lines[0].Qty, dir, "")
		if errors.Is(err, inventory.ErrInsufficientStock) {
			return &inventory.InsufficientError{Short: []inventory.Shortfall{{Line: lines[0], Available: n}}}
		}
		return err
	}
	return m.reduceLines(ctx, lines, key)
}

// lineRecord returns the record of a lines call: keyed by its key and
// direction, or by a random id.
func (m *Manager) lineRecord(dir driver.Direction, key string) *record {
	if key == "" {
		return m.newRecord(kindUnkeyed, rediskeys.NewNonce())
	}
	return m.newRecord(kindKeyed, string(dir)+":"+key)
}

// startLines creates the record of a keyed lines call, or finds the
// earlier call's: done is true when that call took effect (ErrDuplicate),
// resume when it is under way or died midway (r is then its record).
func (m *Manager) startLines(ctx context.Context, r *record, lines []inventory.Line) (resume bool, err error) {
	for range 2 {
		ok, err := m.begin(ctx, r, lines, LinesTTL)
		if err != nil || ok {
			return false, err
		}
		switch r.st {
		case stConfirmed:
			return false, fmt.Errorf("%w: key %q", inventory.ErrDuplicate, strings.TrimPrefix(r.id, string(driver.DirReduce)+":"))
		case stReleased: // a call that failed: the key is free again
			if err := m.drop(ctx, r); err != nil {
				return false, err
			}
			r.nonce = rediskeys.NewNonce()
		default:
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: the record of key %q keeps changing", inventory.ErrContention, r.id)
}

// reduceLines holds every line under a record of the call's own, then
// confirms it as Confirm does: all lines or none, and a call that dies
// midway leaves only holds, which expire after LinesTTL.
func (m *Manager) reduceLines(ctx context.Context, lines []inventory.Line, key string) error {
	r := m.lineRecord(driver.DirReduce, key)
	resume, err := m.startLines(ctx, r, lines)
	if err != nil {
		return err
	}
	if resume {
		// The earlier call with this key died or runs: finish it.
		if r.st != stReserving {
			return fmt.Errorf("%w: a call with key %q is under way", inventory.ErrContention, key)
		}
	} else if err := m.holdAll(ctx, r); err != nil {
		return err
	}
	err = m.commit(ctx, r, []string{stReserving})
	switch {
	case errors.Is(err, inventory.ErrHoldReleased):
		m.abandon(ctx, r)
		return fmt.Errorf("%w: the call took longer than %v", inventory.ErrContention, LinesTTL)
	case err != nil:
		return err
	case key == "":
		return m.drop(ctx, r)
	}
	return nil
}

// linesKey is the idempotency key of one line of a ReturnLines.
func linesKey(nonce string) string { return "tiered-lines:" + nonce }

// returnLines checks that every line fits below MaxStock, then returns
// each with an idempotency key of the call's (its record's nonce), so that
// a keyed retry of a call that died midway finishes it.
func (m *Manager) returnLines(ctx context.Context, lines []inventory.Line, key string) error {
	r := m.lineRecord(driver.DirReturn, key)
	if key != "" {
		resume, err := m.startLines(ctx, r, lines)
		if err != nil {
			if errors.Is(err, inventory.ErrDuplicate) {
				return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
			}
			return err
		}
		lines = r.lines
		if !resume {
			if err := m.checkReturns(ctx, lines); err != nil {
				m.abandon(ctx, r)
				return err
			}
		}
	} else if err := m.checkReturns(ctx, lines); err != nil {
		return err
	}
	for _, l := range lines {
		_, err := m.moveAs(ctx, l.SKU, l.Qty, driver.DirReturn, linesKey(r.nonce), key)
		if err != nil && !errors.Is(err, inventory.ErrDuplicate) {
			return err
		}
	}
	if key == "" {
		return nil
	}
	_, _, err := m.to(ctx, r, []string{stReserving}, stConfirmed, m.cfg.keyTTL)
	return err
}

// checkReturns checks that every line's SKU exists and its units fit below
// MaxStock.
func (m *Manager) checkReturns(ctx context.Context, lines []inventory.Line) error {
	for _, l := range lines {
		for i := 0; ; i++ {
			r, err := m.part(ctx, l.SKU, "check", "", l.Qty)
			if err != nil {
				return err
			}
			if r[0] == codeNoState && i == 0 {
				if err := m.warm(ctx, l.SKU); err != nil {
					return err
				}
				continue
			}
			if r[0] == codeRefused {
				return fmt.Errorf("%q: %w", l.SKU, driver.CheckReturn(r[1], l.Qty))
			}
			if r[0] != codeMoved {
				return fmt.Errorf("check %q: script replied %v", l.SKU, r)
			}
			break
		}
	}
	return nil
}

// Sweep implements the backend of [inventory.OrderManager.Sweep]: it
// releases the expired holds of every SKU that has some (each sweep index
// lists them, by when they fall due), and settles the lines pinned by a
// Confirm that died, PinGrace after their hold's TTL, by the hold's record.
// It returns how many lines (one hold's units on one SKU) it released or
// settled.
func (o orders) Sweep(ctx context.Context) (int, error) {
	m := o.m
	if err := m.refused(); err != nil {
		return 0, err
	}
	indexes := []string{rediskeys.SweepIndex(m.cfg.prefix)}
	if m.cluster() {
		slots, err := m.rdb.ZRange(ctx, rediskeys.SweepSlots(m.cfg.prefix), 0, -1).Result()
		if err != nil {
			return 0, withCtx(ctx, err)
		}
		indexes = indexes[:0]
		for _, s := range slots {
			n, err := strconv.Atoi(s)
			if err != nil {
				return 0, fmt.Errorf("sweep slots hold %q", s)
			}
			indexes = append(indexes, rediskeys.SlotSweepIndex(m.cfg.prefix, n))
		}
	}
	return sumEach(ctx, indexes, m.sweepIndexed)
}

// sweepRounds bounds the rounds of one Sweep over one index.
const sweepRounds = 10

// sweepIndexed sweeps the SKUs of one index that are due by the Redis clock.
func (m *Manager) sweepIndexed(ctx context.Context, index string) (int, error) {
	total := 0
	for range sweepRounds {
		now, err := m.rdb.Time(ctx).Result()
		if err != nil {
			return total, withCtx(ctx, err)
		}
		skus, err := m.rdb.ZRangeByScore(ctx, index, &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: SweepBatch,
		}).Result()
		if err != nil {
			return total, withCtx(ctx, err)
		}
		n, err := sumEach(ctx, skus, m.sweepSKU)
		total += n
		if err != nil {
			return total, err
		}
		if len(skus) < SweepBatch {
			return total, nil
		}
	}
	return total, nil
}

// sweepSKU releases sku's expired holds and settles its pinned parts whose
// Confirm died.
func (m *Manager) sweepSKU(ctx context.Context, sku string) (int, error) {
	keys := []string{m.stateKey(sku), m.journalKey(sku), m.sweepIndex(sku)}
	cmd, _, err := m.sc.parts.Run(ctx, m.rdb, 0, 0, keys, "sweep", "", PinGrace.Milliseconds(), sku)
	m.result(ctx, err)
	if err != nil {
		return 0, fmt.Errorf("sweep %q: %w", sku, withCtx(ctx, err))
	}
	res, err := strs(cmd.Val())
	if err != nil || res[0] == "3" {
		return 0, err
	}
	if len(res) < 2 {
		return 0, fmt.Errorf("sweep %q: script replied %q", sku, res)
	}
	n, err := strconv.Atoi(res[1])
	if err != nil {
		return 0, fmt.Errorf("sweep %q: script replied %q", sku, res)
	}
	for _, f := range res[2:] {
		if err := m.settlePinned(ctx, sku, f); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// settlePinned settles the part field of sku, pinned by a Confirm that
// died, by its record: sold when it says confirmed, released otherwise
// (the record moves to released first, so that a late Confirm fails).
func (m *Manager) settlePinned(ctx context.Context, sku, field string) error {
	rest, ok := strings.CutPrefix(field, "P:")
	nonce, rest, ok2 := strings.Cut(rest, ":")
	kind, id, ok3 := strings.Cut(rest, ":")
	if !ok || !ok2 || !ok3 {
		return fmt.Errorf("sweep %q: bad part %q", sku, field)
	}
	r := &record{key: rediskeys.Order(m.cfg.prefix, kind, id), kind: kind, id: id, nonce: nonce}
	st, _, err := m.to(ctx, r, []string{stHeld, stReserving}, stReleased, m.cfg.keyTTL)
	if err != nil {
		return err
	}
	op := "release"
	if st == stConfirmed {
		op = "sell"
	}
	_, err = m.part(ctx, sku, op, field, m.settleArgs(ctx, r, op, ledger.Expire)...)
	return err
}
