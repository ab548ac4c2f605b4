package luascript

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
)

//go:embed orders_holds.lua
var holdsLua string

//go:embed orders.lua
var ordersLua string

var ordersScript = rediskeys.NewScript(noLedger + holdsLua + ordersLua)

var _ inventory.OrderManager = (*Manager)(nil)

// Orders: Manager implements [inventory.OrderManager] as follows; the
// constants below are the bounds it documents.
//
// One step. On one Redis, and on a Redis Cluster when the lines (and the
// hold's record) share one slot, every call is one run of orders.lua: all
// lines move in one atomic step, a hold's TTL is read against Redis TIME
// inside the script, and the expired holds of every SKU the step moves are
// released in the same step. Reduce and Return (move.lua) release them
// too: each SKU with holds has a hold marker, PREFIX{tag}:m:SKU, holding
// the earliest deadline of its holds, which move.lua reads in the same MGET
// as the stock; a SKU without holds costs no extra command and no TIME.
//
// Across Cluster slots, the lines of each slot are held by one script (a
// part, in that slot) under an order record in the slot of the hold id
// (or of the call's key); a refused part makes the call give back the
// parts it made, and a crash midway leaves parts that expire. Confirm pins
// every part (a pinned part no longer expires by itself; one found past
// its time is released and the Confirm fails with ErrHoldReleased), then
// moves the record from held to confirmed in one step, then sells the
// parts. The record decides: a Cancel, or Sweep settling an expired hold,
// moves it from held to released in one step, so of a Confirm and the
// hold's expiry exactly one wins. Lines calls across slots make pinned
// parts and confirm their record the same way. Sweep settles a pinned part
// whose Confirm or call died by its record: sold if the record is
// confirmed, released otherwise, once the hold's (or call's) time has
// passed. A keyed lines call that died leaves its key busy
// (ErrContention) until its time passes; then a new call takes the key
// over. A Reserve that died (or is still under way) is taken over by a
// retry with its hold id at once: the retry releases the earlier
// attempt's record and parts, which that attempt's nonce names, and holds
// anew; the earlier attempt, if it still runs, finds its record gone at
// its commit and gives back what it made. A pending multi-slot return reserves no room below MaxStock: a
// plain Return racing it near MaxStock could push the stock past it.
//
// Sweep releases, per index (one per Redis; one per Cluster slot, visited
// only for the slots writers named in PREFIX{sweep}:xs), at most
// SweepBatch x SweepRounds due parts per call. With Reap every period p, a
// hold is released at most p (plus one Sweep's duration) after its TTL
// passes, as long as fewer than SweepBatch x SweepRounds holds per index
// fall due per period; a larger backlog drains at that rate, and any call
// that moves a SKU releases that SKU's expired holds at once. A part
// pinned by a Confirm that died is settled PinGrace after the hold's TTL;
// the parts of a multi-slot lines call that died, LinesTTL after it began.
//
// Memory: a hold's record lives until the hold ends (confirmed, cancelled,
// or released after its TTL) and then for the key TTL ([WithKeyTTL]),
// counted from its TTL for an expired hold; its parts, holds-set entries,
// markers and held counters go when it ends. Keyed lines calls keep a
// record for the key TTL, unkeyed ones nothing; the Cluster's slot set has
// at most one entry per slot, dropped a minute after its index empties.
// Redis holds therefore at most one record per hold not yet released plus
// one per hold or keyed call that ended within the key TTL: no unbounded
// growth. Order calls do not wait for replicas (WithReplicas covers Init,
// Reduce and Return).
const (
	// LinesTTL is how long a multi-slot lines call may take before Sweep
	// may settle its parts: a crashed call's units come back after it.
	LinesTTL = 10 * time.Second
	// PinGrace is how long after a hold's TTL a part pinned by a Confirm
	// that has not finished waits before Sweep settles it.
	PinGrace = 5 * time.Second
	// SweepBatch is how many due parts one sweep script releases.
	SweepBatch = 100
	// SweepRounds is how many sweep scripts one Sweep runs per index.
	SweepRounds = 10
)

// orders is the Manager's configuration of the order protocol; tests
// shorten it.
type orders struct {
	linesTTL, pinGrace time.Duration
}

var defaultOrders = orders{linesTTL: LinesTTL, pinGrace: PinGrace}

// Record kinds (rediskeys.Order).
const (
	kindHold    = "h"
	kindKeyed   = "k"
	kindUnkeyed = "r"
)

// slotLines is the lines of a call in one slot.
type slotLines struct {
	lines []inventory.Line
	slot  int
	part  string // the part's key, in a multi-slot order
}

// order is a multi-slot order: a record and a part per slot.
type order struct {
	kind, id, rec, nonce string
	groups               []slotLines
}

// callKey is the idempotency key of a keyed lines call's order (its id
// is DIR:KEY), or "".
func (o *order) callKey() string {
	if o.kind != kindKeyed {
		return ""
	}
	_, key, _ := strings.Cut(o.id, ":")
	return key
}

func (m *Manager) cluster() bool {
	_, ok := m.client.(*redis.ClusterClient)
	return ok
}

// bySlot splits lines by Cluster slot, in order of first appearance; on one
// Redis every line is in one group.
func (m *Manager) bySlot(lines []inventory.Line) []slotLines {
	if !m.cluster() {
		return []slotLines{{lines: lines}}
	}
	var gs []slotLines
	at := map[int]int{}
	for _, l := range lines {
		s := rediskeys.Slot(l.SKU)
		i, ok := at[s]
		if !ok {
			i = len(gs)
			at[s] = i
			gs = append(gs, slotLines{slot: s})
		}
		gs[i].lines = append(gs[i].lines, l)
	}
	return gs
}

// oneStep reports whether the lines of gs and the record of (kind, id), if
// any, can move in one script.
func (m *Manager) oneStep(gs []slotLines, kind, id string) bool {
	if !m.cluster() {
		return true
	}
	return len(gs) == 1 && (kind == "" || rediskeys.OrderSlot(kind, id) == gs[0].slot)
}

func (m *Manager) index(g slotLines) string {
	if !m.cluster() {
		return rediskeys.SweepIndex(m.prefix)
	}
	return rediskeys.SlotSweepIndex(m.prefix, g.slot)
}

// lineKeys returns the stock keys, holds sets and held counters of lines.
func (m *Manager) lineKeys(lines []inventory.Line, extra ...string) []string {
	n := len(lines)
	keys := make([]string, 3*n, 3*n+len(extra))
	for i, l := range lines {
		keys[i] = rediskeys.Stock(m.prefix, l.SKU)
		keys[n+i] = rediskeys.Holds(m.prefix, l.SKU)
		keys[2*n+i] = rediskeys.Held(m.prefix, l.SKU)
	}
	return append(keys, extra...)
}

// lineArgs returns the arguments of a lines op: op, n, MaxStock, the six
// op-specific arguments (padded), the quantities.
func lineArgs(op string, lines []inventory.Line, specific ...any) []any {
	args := make([]any, 0, 9+len(lines))
	args = append(args, op, len(lines), inventory.MaxStock)
	args = append(args, specific...)
	for len(args) < 9 {
		args = append(args, "")
	}
	for _, l := range lines {
		args = append(args, l.Qty)
	}
	return args
}

// withRef appends to the arguments of a lines or part op the call's key
// and reference, when the Manager keeps a ledger (orders.lua).
func (m *Manager) withRef(ctx context.Context, args []any, key string) []any {
	if !m.ledgerOn {
		return args
	}
	return append(args, key, driver.Ref(ctx))
}

// stockLines encodes lines as "QTY STOCKKEY\n" each (an order record's
// lines are rediskeys.EncodeLines).
func (m *Manager) stockLines(lines []inventory.Line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strconv.FormatInt(l.Qty, 10) + " " + rediskeys.Stock(m.prefix, l.SKU) + "\n")
	}
	return b.String()
}

func (m *Manager) newOrder(kind, id, nonce string, gs []slotLines) *order {
	o := &order{kind: kind, id: id, rec: rediskeys.Order(m.prefix, kind, id), nonce: nonce, groups: gs}
	for i := range o.groups {
		o.groups[i].part = rediskeys.Part(m.prefix, gs[i].lines[0].SKU, nonce+":"+kind+":"+id)
	}
	return o
}

// eval runs orders.lua on c (never sent twice) and returns its reply and
// status.
func eval(ctx context.Context, s *rediskeys.Script, c redis.UniversalClient, keys []string, args ...any) ([]any, string, error) {
	cmd, _, err := s.Run(ctx, c, 0, 0, keys, args...)
	if err != nil {
		return nil, "", err
	}
	res, err := cmd.Slice()
	if err != nil {
		return nil, "", err
	}
	if len(res) == 0 {
		return nil, "", errors.New("orders script replied nothing")
	}
	st, ok := res[0].(string)
	if !ok {
		return nil, "", fmt.Errorf("orders script status is %T", res[0])
	}
	return res, st, nil
}

func (m *Manager) eval(ctx context.Context, keys []string, args ...any) ([]any, string, error) {
	return eval(ctx, m.scripts.orders, m.client, keys, args...)
}

func toInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		return strconv.ParseInt(n, 10, 64)
	}
	return 0, fmt.Errorf("orders script value is %T", v)
}

// refusalErr turns a "short" or "notfound" reply on lines into its error.
func refusalErr(res []any, st string, lines []inventory.Line, dir driver.Direction) error {
	line := func(v any) (inventory.Line, error) {
		i, err := toInt(v)
		if err != nil || i < 1 || int(i) > len(lines) {
			return inventory.Line{}, fmt.Errorf("orders script named line %v", v)
		}
		return lines[i-1], nil
	}
	switch st {
	case "notfound":
		l, err := line(res[1])
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %q", inventory.ErrNotFound, l.SKU)
	case "short":
		e := &inventory.InsufficientError{}
		for i := 1; i+1 < len(res); i += 2 {
			l, err := line(res[i])
			if err != nil {
				return err
			}
			n, err := toInt(res[i+1])
			if err != nil {
				return err
			}
			if dir == driver.DirReturn {
				return fmt.Errorf("%q: %w", l.SKU, driver.CheckReturn(n, l.Qty))
			}
			e.Short = append(e.Short, inventory.Shortfall{Line: l, Available: n})
		}
		return e
	}
	return fmt.Errorf("unknown orders script status %q", st)
}

// MoveLines implements [front.Backend].
func (b *backend) MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error {
	return (*Manager)(b).lines(ctx, dir, lines, key)
}

// lines moves lines in direction dir, keyed by key when not "": in one
// script when every key they touch is in one slot, otherwise part by part
// under an order record.
func (m *Manager) lines(ctx context.Context, dir driver.Direction, lines []inventory.Line, key string) error {
	gs := m.bySlot(lines)
	kind, id := kindUnkeyed, rediskeys.NewNonce()
	if key != "" {
		kind, id = kindKeyed, string(dir)+":"+key
	}
	recKind := ""
	if key != "" {
		recKind = kind
	}
	if m.oneStep(gs, recKind, id) {
		return m.linesInOneScript(ctx, dir, lines, key, kind, id)
	}
	return m.linesByParts(ctx, m.newOrder(kind, id, rediskeys.NewNonce(), gs), dir, lines, key)
}

// linesInOneScript moves lines in one script, which also records key (of
// order kind and id) when keyed.
func (m *Manager) linesInOneScript(ctx context.Context, dir driver.Direction, lines []inventory.Line, key, kind, id string) error {
	keys := m.lineKeys(lines)
	keyed := "0"
	if key != "" {
		keys = append(keys, rediskeys.Order(m.prefix, kind, id))
		keyed = "1"
	}
	args := m.withRef(ctx, lineArgs("lines", lines, string(dir), m.keyTTL.Milliseconds(), keyed), key)
	return m.moveStep(ctx, keys, args, lines, dir, func(st string) error {
		switch st {
		case "dup":
			return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
		case "busy":
			return fmt.Errorf("%w: a call with key %q is under way", inventory.ErrContention, key)
		}
		return nil
	})
}

// moveStep runs a step of the orders script that moves lines in direction
// dir (a call in one script, a part of an order, a Reserve in one script)
// and returns its error: nil when it replied "ok", what other says of its
// status when not nil (the statuses of that step alone), else the refusal
// of "short" or "notfound" (refusalErr).
func (m *Manager) moveStep(ctx context.Context, keys []string, args []any, lines []inventory.Line, dir driver.Direction,
	other func(st string) error) error {
	res, st, err := m.eval(ctx, keys, args...)
	switch {
	case err != nil:
		return err
	case st == "ok":
		return nil
	}
	if err := other(st); err != nil {
		return err
	}
	return refusalErr(res, st, lines, dir)
}

// linesByParts moves lines as order o: it begins o's record, makes a part
// per slot (unwinding the made ones when one is refused), commits the
// record, then sells the parts.
func (m *Manager) linesByParts(ctx context.Context, o *order, dir driver.Direction, lines []inventory.Line, key string) error {
	recKind := "unkeyed"
	if key != "" {
		recKind = "keyed"
	}
	if err := m.begin(ctx, o, m.linesTTL, recKind, lines); err != nil {
		if errors.Is(err, inventory.ErrDuplicate) {
			return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
		}
		return err
	}
	partKind := "reduce"
	if dir == driver.DirReturn {
		partKind = "return"
	}
	for i := range o.groups {
		if err := m.makePart(ctx, o, i, partKind, m.linesTTL, dir); err != nil {
			m.unwind(ctx, o, i)
			return err
		}
	}
	st, err := m.recordOp(ctx, o, "commit", "reserving", "confirmed")
	if err != nil {
		return err // pinned parts: Sweep settles them by the record
	}
	if st != "ok" {
		// Sweep released the record: the call took longer than LinesTTL.
		m.endParts(ctx, o, "release")
		m.recordOp(ctx, o, "finish", "drop")
		return fmt.Errorf("%w: the call took longer than %v", inventory.ErrContention, m.linesTTL)
	}
	m.endParts(ctx, o, "sell") // on error, Sweep sells them
	m.recordOp(ctx, o, "finish", "")
	return nil
}

// begin starts the record of o, ending a stale earlier attempt first.
func (m *Manager) begin(ctx context.Context, o *order, ttl time.Duration, recKind string, lines []inventory.Line) error {
	for range 3 {
		res, st, err := m.eval(ctx, []string{o.rec}, "begin", o.nonce, ttl.Milliseconds(), m.keyTTL.Milliseconds(),
			rediskeys.EncodeLines(lines), recKind, o.kind+":"+o.id)
		switch {
		case err != nil:
			return err
		case st == "ok":
			return nil
		case st == "dup":
			return inventory.ErrDuplicate
		case st == "busy" && (recKind != "hold" || len(res) != 4 || res[2] != rediskeys.EncodeLines(lines)):
			return fmt.Errorf("%w: an earlier attempt of this order is under way", inventory.ErrContention)
		case (st == "stale" || st == "busy") && len(res) == 4:
			if err := m.endEarlier(ctx, o, res, st == "busy"); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("unknown orders script status %q", st)
	}
	return fmt.Errorf("%w: the order record kept changing", inventory.ErrContention)
}

// endEarlier ends the earlier attempt of o that begin found, from its
// reply res: one past its time, or, live (a Reserve of the same lines),
// one under way or cut by a crash, which its retry takes over at once.
// Its parts carry its nonce, so its later steps touch nothing of this
// attempt's (its commit finds the record gone and it gives back what it
// made).
func (m *Manager) endEarlier(ctx context.Context, o *order, res []any, live bool) error {
	old, err := m.orderFromRecord(o.rec, res[1], res[2], res[3])
	if err != nil {
		return err
	}
	onlyStale := "1"
	if live {
		onlyStale = "0"
	}
	st, err := m.recordOpArgs(ctx, old, "abort", onlyStale, "reserving")
	if err != nil || st != "ok" {
		return err
	}
	if err := m.endParts(ctx, old, "release"); err != nil {
		return err
	}
	_, err = m.recordOp(ctx, old, "finish", "drop")
	return err
}

// orderFromRecord rebuilds an order from its record's nonce, SKU lines and
// KIND:ID.
func (m *Manager) orderFromRecord(rec string, nonce, sl, ki any) (*order, error) {
	n, _ := nonce.(string)
	s, _ := sl.(string)
	k, _ := ki.(string)
	kind, id, ok := strings.Cut(k, ":")
	if n == "" || !ok {
		return nil, fmt.Errorf("order record %s is incomplete", rec)
	}
	lines, err := rediskeys.DecodeLines(s)
	if err != nil {
		return nil, err
	}
	o := m.newOrder(kind, id, n, m.bySlot(lines))
	if o.rec != rec {
		return nil, fmt.Errorf("order record %s names %s", rec, o.rec)
	}
	return o, nil
}

// makePart makes part i of o: kind "hold", "reduce" or "return".
func (m *Manager) makePart(ctx context.Context, o *order, i int, kind string, ttl time.Duration, dir driver.Direction) error {
	g := o.groups[i]
	if err := m.mark(ctx, g.slot); err != nil {
		return err
	}
	primary := "0"
	if i == 0 {
		primary = "1"
	}
	keys := m.lineKeys(g.lines, g.part, m.index(g))
	args := m.withRef(ctx, lineArgs("part", g.lines, kind, ttl.Milliseconds(), o.nonce,
		m.stockLines(g.lines), o.rec, primary), o.callKey())
	return m.moveStep(ctx, keys, args, g.lines, dir, func(st string) error {
		if st == "exists" {
			return fmt.Errorf("%w: part %s exists", inventory.ErrContention, g.part)
		}
		return nil
	})
}

// unwind gives back the parts of o from 0 to i (part i may or may not have
// been made) and frees its record. What fails here expires.
func (m *Manager) unwind(ctx context.Context, o *order, i int) {
	for j := 0; j <= i && j < len(o.groups); j++ {
		m.partOp(ctx, o, j, "release")
	}
	m.recordOp(ctx, o, "finish", "drop")
}

func (m *Manager) partOp(ctx context.Context, o *order, i int, how string) error {
	_, _, err := m.eval(ctx, []string{o.groups[i].part}, "endpart", o.nonce, how)
	return err
}

// endParts sells or releases every part of o; it returns the first error.
func (m *Manager) endParts(ctx context.Context, o *order, how string) error {
	var first error
	for i := range o.groups {
		if err := m.partOp(ctx, o, i, how); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (m *Manager) recordOp(ctx context.Context, o *order, op string, args ...any) (string, error) {
	return m.recordOpArgs(ctx, o, op, args...)
}

func (m *Manager) recordOpArgs(ctx context.Context, o *order, op string, args ...any) (string, error) {
	_, st, err := m.eval(ctx, []string{o.rec}, append([]any{op, o.nonce}, args...)...)
	return st, err
}

// Reserve implements [front.Backend].
func (b *backend) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return (*Manager)(b).reserve(ctx, id, lines, ttl)
}

func (m *Manager) reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	gs := m.bySlot(lines)
	if m.oneStep(gs, kindHold, id) {
		if err := m.mark(ctx, gs[0].slot); err != nil {
			return err
		}
		rec := rediskeys.Order(m.prefix, kindHold, id)
		keys := m.lineKeys(lines, rec, m.index(gs[0]))
		args := lineArgs("reserve", lines, ttl.Milliseconds(), m.keyTTL.Milliseconds(),
			rediskeys.NewNonce(), m.stockLines(lines), rediskeys.EncodeLines(lines))
		return m.moveStep(ctx, keys, args, lines, driver.DirReduce, func(st string) error {
			if st == "dup" {
				return inventory.ErrDuplicate
			}
			return nil
		})
	}
	o := m.newOrder(kindHold, id, rediskeys.NewNonce(), gs)
	if err := m.begin(ctx, o, ttl, "hold", lines); err != nil {
		return err
	}
	for i := range o.groups {
		if err := m.makePart(ctx, o, i, "hold", ttl, driver.DirReduce); err != nil {
			m.unwind(ctx, o, i)
			return err
		}
	}
	st, err := m.recordOp(ctx, o, "commit", "reserving", "held")
	if err != nil {
		return err // the parts expire
	}
	if st != "ok" {
		// Cancelled, or taken over after its time, while it was made.
		m.unwind(ctx, o, len(o.groups))
		return inventory.ErrDuplicate
	}
	return nil
}

// Confirm implements [front.Backend].
func (b *backend) Confirm(ctx context.Context, id string) error {
	return (*Manager)(b).endHold(ctx, true, id)
}

// Cancel implements [front.Backend].
func (b *backend) Cancel(ctx context.Context, id string) error {
	return (*Manager)(b).endHold(ctx, false, id)
}

func (m *Manager) endHold(ctx context.Context, confirm bool, id string) error {
	rec := rediskeys.Order(m.prefix, kindHold, id)
	how := "cancel"
	if confirm {
		how = "confirm"
	}
	res, st, err := m.eval(ctx, []string{rec}, "end", how)
	if err != nil || st != "cross" {
		if err != nil {
			return err
		}
		return endStatus(st)
	}
	if len(res) != 5 {
		return fmt.Errorf("orders script replied %d values to end", len(res))
	}
	o, err := m.orderFromRecord(rec, res[2], res[3], res[4])
	if err != nil {
		return err
	}
	state, _ := res[1].(string)
	if confirm {
		return m.crossConfirm(ctx, o, state)
	}
	return m.crossCancel(ctx, o, state)
}

func endStatus(st string) error {
	switch st {
	case "ok":
		return nil
	case "dup":
		return fmt.Errorf("%w: the hold is already confirmed", inventory.ErrDuplicate)
	case "released":
		return inventory.ErrHoldReleased
	case "confirmed":
		return inventory.ErrHoldConfirmed
	case "notfound", "gone":
		return inventory.ErrHoldNotFound
	}
	return fmt.Errorf("unknown orders script status %q", st)
}

// crossConfirm confirms a multi-slot hold whose record was in state st.
func (m *Manager) crossConfirm(ctx context.Context, o *order, st string) error {
	switch st {
	case "confirmed":
		m.endParts(ctx, o, "sell")
		m.recordOp(ctx, o, "finish", "")
		return endStatus("dup")
	case "released":
		m.endParts(ctx, o, "release")
		m.recordOp(ctx, o, "finish", "")
		return endStatus("released")
	case "reserving":
		return fmt.Errorf("%w: the Reserve of this hold has not finished", inventory.ErrContention)
	}
	pinned := true
	for _, g := range o.groups {
		_, st, err := m.eval(ctx, []string{g.part}, "pin", o.nonce, m.pinGrace.Milliseconds())
		if err != nil {
			return err // pinned parts: Sweep settles them by the record
		}
		if st != "ok" {
			pinned = false
			break
		}
	}
	if !pinned {
		st, err := m.recordOp(ctx, o, "abort", "0", "")
		if err != nil {
			return err
		}
		if st == "confirmed" { // a Confirm of the same hold won
			return m.crossConfirm(ctx, o, st)
		}
		m.endParts(ctx, o, "release")
		m.recordOp(ctx, o, "finish", "")
		return endStatus("released")
	}
	st, err := m.recordOp(ctx, o, "commit", "held", "confirmed")
	if err != nil {
		return err
	}
	switch st {
	case "ok":
		m.endParts(ctx, o, "sell") // on error, Sweep sells them
		m.recordOp(ctx, o, "finish", "")
		return nil
	case "gone":
		return inventory.ErrHoldNotFound
	}
	return m.crossConfirm(ctx, o, st)
}

// crossCancel cancels a multi-slot hold whose record was in state st.
func (m *Manager) crossCancel(ctx context.Context, o *order, st string) error {
	if st == "held" || st == "reserving" {
		var err error
		if st, err = m.recordOp(ctx, o, "abort", "0", ""); err != nil {
			return err
		}
	}
	switch st {
	case "confirmed":
		m.endParts(ctx, o, "sell")
		m.recordOp(ctx, o, "finish", "")
		return endStatus("confirmed")
	case "ok", "released":
		how := "release"
		if st == "ok" {
			how = "cancel" // released now, by this Cancel: the ledger's kind
		}
		if err := m.endParts(ctx, o, how); err != nil {
			return err
		}
		_, err := m.recordOp(ctx, o, "finish", "")
		return err
	case "gone":
		return inventory.ErrHoldNotFound
	}
	return fmt.Errorf("unknown hold state %q", st)
}

// Held implements [front.Backend].
func (b *backend) Held(ctx context.Context, sku string) (int64, error) {
	m := (*Manager)(b)
	var exists *redis.IntCmd
	var held *redis.StringCmd
	_, err := m.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, rediskeys.Stock(m.prefix, sku))
		held = p.Get(ctx, rediskeys.Held(m.prefix, sku))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	if exists.Val() == 0 {
		return 0, inventory.ErrNotFound
	}
	if errors.Is(held.Err(), redis.Nil) {
		return 0, nil
	}
	return held.Int64()
}

// Sweep implements [front.Backend]. See [SweepBatch] for its bound.
func (b *backend) Sweep(ctx context.Context) (int, error) {
	m := (*Manager)(b)
	if !m.cluster() {
		n, _, err := m.sweepIndex(ctx, m.client, rediskeys.SweepIndex(m.prefix))
		return n, err
	}
	set := rediskeys.SweepSlots(m.prefix)
	slots, err := m.client.ZRange(ctx, set, 0, -1).Result()
	if err != nil {
		return 0, err
	}
	total := 0
	for _, s := range slots {
		slot, err := strconv.Atoi(s)
		if err != nil || slot < 0 || slot >= rediskeys.Slots {
			return total, fmt.Errorf("slot set %s holds %q", set, s)
		}
		n, left, err := m.sweepIndex(ctx, m.client, rediskeys.SlotSweepIndex(m.prefix, slot))
		total += n
		if err != nil {
			return total, err
		}
		if left == 0 {
			if _, _, err := m.eval(ctx, []string{set}, "unmark", s, slotMarkAge.Milliseconds()); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// The set of Cluster slots to sweep: a writer names a slot (mark) before
// it makes a part there, at most once per slotMarkFresh per Manager; Sweep
// takes a slot out once its index is empty and nobody named it for
// slotMarkAge. A part made more than slotMarkAge - slotMarkFresh after
// its writer named the slot could be missed by Sweep (traffic on its SKUs
// still releases it); calls take far less.
const (
	slotMarkFresh = 10 * time.Second
	slotMarkAge   = time.Minute
)

// mark names slot in the set of slots to sweep, unless this Manager did
// within slotMarkFresh.
func (m *Manager) mark(ctx context.Context, slot int) error {
	if m.marks == nil {
		return nil
	}
	now := time.Since(m.marks.epoch).Nanoseconds() + 1
	if last := m.marks.at[slot].Load(); last != 0 && now-last < slotMarkFresh.Nanoseconds() {
		return nil
	}
	if _, _, err := m.eval(ctx, []string{rediskeys.SweepSlots(m.prefix)}, "mark", slot); err != nil {
		return err
	}
	m.marks.at[slot].Store(now)
	return nil
}

// slotMarks is when a Manager last named each slot, in nanoseconds since
// epoch (0: never).
type slotMarks struct {
	epoch time.Time
	at    [rediskeys.Slots]atomic.Int64
}

// newSlotMarks returns the slot marks of a Manager over client: nil but on
// a Cluster.
func newSlotMarks(client redis.UniversalClient) *slotMarks {
	if _, ok := client.(*redis.ClusterClient); !ok {
		return nil
	}
	return &slotMarks{epoch: time.Now()}
}

// sweepIndex runs the sweep script on one index, on client c, up to
// SweepRounds times, and settles the pinned parts it lists.
func (m *Manager) sweepIndex(ctx context.Context, c redis.UniversalClient, idx string) (total int, left int64, err error) {
	for range SweepRounds {
		res, st, err := eval(ctx, m.scripts.orders, c, []string{idx}, "sweep", SweepBatch, m.pinGrace.Milliseconds())
		if err != nil {
			return total, left, err
		}
		if st != "ok" || len(res) < 4 {
			return total, left, fmt.Errorf("unknown orders script status %q", st)
		}
		n, _ := toInt(res[1])
		total += int(n)
		left, _ = toInt(res[3])
		for _, pk := range res[4:] {
			k, _ := pk.(string)
			released, err := m.settle(ctx, k)
			if err != nil {
				return total, left, err
			}
			total += released
		}
		if more, _ := toInt(res[2]); more == 0 {
			break
		}
	}
	return total, left, nil
}

// settle ends pinned part pk as its record says, and returns 1 if that
// released a hold.
func (m *Manager) settle(ctx context.Context, pk string) (int, error) {
	p, err := m.client.HMGet(ctx, pk, "rec", "n").Result()
	if err != nil {
		return 0, err
	}
	rec, _ := p[0].(string)
	nonce, _ := p[1].(string)
	if rec == "" {
		return 0, nil // ended meanwhile
	}
	v, err := m.client.HMGet(ctx, rec, "st", "n", "sl", "ki").Result()
	if err != nil {
		return 0, err
	}
	if v[1] != nonce {
		// No record of this order: it never took effect.
		_, _, err := m.eval(ctx, []string{pk}, "endpart", nonce, "release")
		return 0, err
	}
	o, err := m.orderFromRecord(rec, v[1], v[2], v[3])
	if err != nil {
		return 0, err
	}
	st, _ := v[0].(string)
	return m.settleOrder(ctx, o, st)
}

// settleOrder ends the pinned parts of o, whose record is in state st:
// sold when confirmed, released when released or (aborted here) expired.
// It returns 1 if that released a hold.
func (m *Manager) settleOrder(ctx context.Context, o *order, st string) (int, error) {
	var err error
	flipped := false // this Sweep released the record
	if st != "confirmed" && st != "released" {
		if st, err = m.recordOp(ctx, o, "abort", "1", ""); err != nil || st == "live" {
			return 0, err
		}
		if st == "ok" {
			st, flipped = "released", true
		}
	}
	switch st {
	case "confirmed":
		err = m.endParts(ctx, o, "sell")
	case "released":
		err = m.endParts(ctx, o, "release")
	default: // the record changed under us: the next Sweep sees it
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if _, err = m.recordOp(ctx, o, "finish", ""); err != nil || !flipped || o.kind != kindHold {
		return 0, err
	}
	return 1, nil
}
