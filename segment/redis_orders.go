package segment

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Orders on Redis segments: see [Redis] "Orders" for the design. An order
// (a hold, or a lines call of several lines or with a key) is a record in
// one of the Manager's order buckets, and a line per SKU: a keyed Reduce
// (or Return) on the SKU's segments, with a key that derives from the
// order's nonce and the line's index and lives in the segment it lands
// on. The record decides; the lines follow it.

//go:embed redis_holds.lua
var holdsLua string

//go:embed redis_line.lua
var lineLua string

//go:embed redis_order.lua
var orderLua string

var (
	lineScript  = rediskeys.NewScript(holdsLua + lineLua)
	orderScript = rediskeys.NewScript(orderLua)
)

const (
	// LinesTTL is how long a lines call or a Reserve of a [Redis] may
	// take before Sweep takes it for dead and gives its lines back.
	LinesTTL = 10 * time.Second
	// EndGrace is how long after a Confirm or Cancel decided a hold Sweep
	// waits before it ends the lines that call did not end (it died).
	EndGrace = 5 * time.Second
	// SweepBatch is how many records of one order bucket one Sweep looks
	// at.
	SweepBatch = 100
	// orderBuckets is how many buckets the order records spread over (each
	// in one Cluster slot, with its index).
	orderBuckets = 16
)

// orderTimes is how long an attempt may take and how long after a
// Confirm or Cancel Sweep ends its lines: LinesTTL and EndGrace; tests
// shorten them.
type orderTimes struct {
	attempt, grace time.Duration
}

// errConfirmed is Confirm's error for a hold confirmed already.
var errConfirmed = fmt.Errorf("%w: the hold is already confirmed", inventory.ErrDuplicate)

// Order kinds, as the record keeps them.
const (
	kindHold    = "h"
	kindKeyed   = "k"
	kindUnkeyed = "r"
)

// order is one attempt of an order: its record, index, nonce and lines.
type order struct {
	rec, idx, nonce string
	kind            string
	lines           []inventory.Line
	dir             driver.Direction
}

// bucketTag is the hash tag of order bucket b.
func bucketTag(b int) string { return rediskeys.SegmentTag(".orders", b, orderBuckets) }

// indexKey is the index of order bucket b: PREFIX{tag}:rx.
func (m *Redis) indexKey(b int) string { return m.prefix + bucketTag(b) + ":rx" }

// newOrder returns an attempt, with a fresh nonce, of the order of kind
// and id: PREFIX{tag}:r:KIND:ID, in the bucket of a hash of both.
func (m *Redis) newOrder(kind, id string, lines []inventory.Line, dir driver.Direction) *order {
	h := fnv.New64a()
	h.Write([]byte(kind + ":" + id))
	b := int(h.Sum64() % orderBuckets)
	return &order{rec: m.prefix + bucketTag(b) + ":r:" + kind + ":" + id, idx: m.indexKey(b),
		nonce: rediskeys.NewNonce(), kind: kind, lines: lines, dir: dir}
}

// lineKey is the idempotency key of line i of the attempt of nonce: the
// separator, a control character, is one no caller's key may hold.
func lineKey(nonce string, i int) string { return "\x1e" + nonce + ":" + strconv.Itoa(i) }

// lineCall is line i of o as a call on its home segment, held for hold ms
// when hold > 0, else with its record kept lineTTL.
func (m *Redis) lineCall(o *order, i int, hold int64) redisCall {
	key := lineKey(o.nonce, i)
	l := o.lines[i]
	if hold <= 0 {
		hold = -m.lineTTL()
	}
	return redisCall{sku: l.SKU, s: m.home(key), q: signedQty(l.Qty, o.dir), key: key, dir: o.dir, hold: hold}
}

// lineTTL is how long, in ms, the record of a line taken by a lines call,
// or a void line's, is kept: the key TTL, and at least twice as long as an
// attempt may take, so that Sweep finds it, and a late take the void.
func (m *Redis) lineTTL() int64 { return max(m.ttlMs, 2*m.times.attempt.Milliseconds()) }

// orderOp runs op of redis_order.lua on o's record and returns its reply;
// with WithReplicas, a write ("peek" is none) waits for them, and fewer
// is an error (see [Redis.short]).
func (m *Redis) orderOp(ctx context.Context, o *order, op string, args ...any) ([]string, error) {
	replicas := m.replicas
	if op == "peek" {
		replicas = 0
	}
	cmd, acked, err := orderScript.Run(ctx, m.client, replicas, m.replicaTO, []string{o.rec, o.idx}, append([]any{op}, args...)...)
	if err != nil {
		return nil, err
	}
	res, err := cmd.StringSlice()
	if err == nil && len(res) == 0 {
		err = errors.New("order script replied nothing")
	}
	if err == nil && replicas > 0 {
		err = m.short(acked)
	}
	return res, err
}

// lineOp runs op ("release", "sell" or "pin") of redis_line.lua on line i
// of o; with WithReplicas it waits for them, as orderOp.
func (m *Redis) lineOp(ctx context.Context, o *order, i int, op string) (any, error) {
	c := m.lineCall(o, i, 0)
	keys := []string{m.segKey(c.sku, c.s), m.recKey(c.sku, c.s, c.dir, c.key)}
	cmd, err := m.write(ctx, lineScript, keys, op, m.lineTTL(), o.lines[i].Qty)
	if err != nil {
		return nil, err
	}
	return cmd.Result()
}

// endLines ends every line of o: "release" gives their units back (and
// voids the lines never taken), "sell" keeps a hold's units sold, "apply"
// applies the lines of a return. It returns the first error; a line that
// failed is ended later by Sweep.
func (m *Redis) endLines(ctx context.Context, o *order, how string) error {
	var first error
	for i := range o.lines {
		var err error
		if how == "apply" {
			err = m.applyReturn(ctx, o, i)
		} else {
			_, err = m.lineOp(ctx, o, i, how)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// applyReturn gives back the units of line i of o, a return whose record
// committed: keyed, so that applying it twice changes nothing; checked
// against MaxStock for its segment alone (the call checked the SKU before
// it committed).
func (m *Redis) applyReturn(ctx context.Context, o *order, i int) error {
	c := m.lineCall(o, i, 0)
	keys := []string{m.segKey(c.sku, c.s), m.recKey(c.sku, c.s, c.dir, c.key)}
	cmd, err := m.write(ctx, takeScript, keys, 0, m.ttlMs, c.q, 2, c.hold)
	if err != nil {
		return err
	}
	res, err := cmd.Int64Slice()
	if err == nil && len(res) == 2 && res[0] != codeMoved && res[0] != codeDuplicate {
		err = fmt.Errorf("the return of %d units of %q was refused (code %d); Sweep tries again", c.q, c.sku, res[0])
	}
	return err
}

// begin starts the record of o for ttl: a hold's retry (takeOver) takes
// over an attempt with the same lines still under way, releasing its
// lines; so does any call an attempt past its time.
func (m *Redis) begin(ctx context.Context, o *order, ttl time.Duration, takeOver bool) error {
	over := "0"
	if takeOver {
		over = "1"
	}
	res, err := m.orderOp(ctx, o, "begin", o.nonce, ttl.Milliseconds(), m.ttlMs, rediskeys.EncodeLines(o.lines),
		o.kind, string(o.dir), over, m.times.attempt.Milliseconds())
	if err != nil {
		return err
	}
	switch res[0] {
	case "ok":
		return nil
	case "dup":
		return inventory.ErrDuplicate
	case "busy":
		return fmt.Errorf("%w: an earlier attempt of this order is under way", inventory.ErrContention)
	case "took":
		if len(res) == 3 {
			// On failure the record keeps naming the earlier attempt, for
			// Sweep to release its lines.
			return m.releaseOld(ctx, o, res[1], res[2])
		}
	}
	return fmt.Errorf("unexpected reply %v to begin", res)
}

// releaseOld releases the lines of the attempt of nonce with lines sl
// (EncodeLines) that o's record took over, then clears its name from the
// record.
func (m *Redis) releaseOld(ctx context.Context, o *order, nonce, sl string) error {
	lines, err := rediskeys.DecodeLines(sl)
	if err != nil {
		return err
	}
	old := *o
	old.nonce, old.lines = nonce, lines
	if err := m.endLines(ctx, &old, "release"); err != nil {
		return err
	}
	_, err = m.orderOp(ctx, o, "oldgone", nonce)
	return err
}

// takeLines takes (or, hold > 0, holds for hold ms) every line of o, a
// Reduce, in order. When one is refused or fails, it gives back those it
// took, drops the record and returns the refusal.
func (m *Redis) takeLines(ctx context.Context, o *order, hold int64) error {
	for i, l := range o.lines {
		c := m.lineCall(o, i, hold)
		rem, err := m.move(ctx, c)
		if err == nil {
			if hook != nil {
				if err := hook("line " + c.key); err != nil {
					return err // as a crash: nothing unwinds
				}
			}
			continue
		}
		m.unwind(ctx, o)
		switch {
		case errors.Is(err, inventory.ErrInsufficientStock):
			return &inventory.InsufficientError{Short: []inventory.Shortfall{{Line: l, Available: rem}}}
		case errors.Is(err, inventory.ErrNotFound):
			return fmt.Errorf("%w: %q", inventory.ErrNotFound, l.SKU)
		case errors.Is(err, inventory.ErrDuplicate): // a Cancel, a Sweep or a retry ended this attempt
			return fmt.Errorf("%w: this attempt was ended by another call", inventory.ErrContention)
		}
		return fmt.Errorf("line %d (%q): %w", i, l.SKU, err)
	}
	return nil
}

// unwind ends an attempt that did not take effect: it releases the
// record, gives back every line (voiding those never taken), and frees
// the record's id. When ctx has ended (the call was cut by it), it does
// that in the background, for a second at most, so that the call returns
// at once and still gives back what it took. What fails here Sweep does
// once the record is due.
func (m *Redis) unwind(ctx context.Context, o *order) {
	if ctx.Err() == nil {
		m.unwindNow(ctx, o)
		return
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	go func() {
		defer cancel()
		m.unwindNow(bg, o)
	}()
}

// unwindNow is unwind's work, under ctx.
func (m *Redis) unwindNow(ctx context.Context, o *order) {
	applied := func(err error) bool { return err == nil || errors.Is(err, rediskeys.ErrReplicas) }
	res, err := m.orderOp(ctx, o, "abort", o.nonce, "0", m.times.grace.Milliseconds())
	if !applied(err) {
		return
	}
	if !applied(m.endLines(ctx, o, "release")) || res[0] == "gone" {
		return // taken over: the record is another attempt's
	}
	_, _ = m.orderOp(ctx, o, "finish", o.nonce, "drop")
}

// MoveLines implements [front.Backend]: ReduceLines or ReturnLines.
func (b *redisBackend) MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error {
	m := (*Redis)(b)
	kind, id := kindUnkeyed, rediskeys.NewNonce()
	if key != "" {
		kind, id = kindKeyed, string(dir)+":"+key
	}
	o := m.newOrder(kind, id, lines, dir)
	if err := m.begin(ctx, o, m.times.attempt, false); err != nil {
		if errors.Is(err, inventory.ErrDuplicate) {
			return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
		}
		return err
	}
	if dir == driver.DirReduce {
		if err := m.takeLines(ctx, o, 0); err != nil {
			return err
		}
	} else if err := m.checkReturns(ctx, lines); err != nil {
		m.unwind(ctx, o)
		return err
	}
	res, err := m.orderOp(ctx, o, "commit", o.nonce, "reserving", "confirmed", m.times.grace.Milliseconds())
	if err != nil {
		return err // the record decides: Sweep gives the lines back, or applies them
	}
	if res[0] != "ok" { // Sweep took it for dead: it took longer than LinesTTL
		if dir == driver.DirReduce {
			_ = m.endLines(ctx, o, "release")
		}
		return fmt.Errorf("%w: the call took longer than %v", inventory.ErrContention, m.times.attempt)
	}
	if dir == driver.DirReturn {
		if err := m.endLines(ctx, o, "apply"); err != nil {
			return nil // committed: Sweep applies what is left
		}
	}
	_, _ = m.orderOp(ctx, o, "finish", o.nonce, "")
	return nil
}

// checkReturns refuses returns that would take a SKU past MaxStock, or
// name a SKU that has no segments, as the SKUs' stock reads.
func (m *Redis) checkReturns(ctx context.Context, lines []inventory.Line) error {
	for _, l := range lines {
		w, err := m.collect(ctx, l.SKU)
		if errors.Is(err, inventory.ErrNotFound) {
			return fmt.Errorf("%w: %q", inventory.ErrNotFound, l.SKU)
		}
		if err != nil {
			return err
		}
		if err := driver.CheckReturn(w.total(), l.Qty); err != nil {
			return fmt.Errorf("%q: %w", l.SKU, err)
		}
	}
	return nil
}

// Reserve implements [front.Backend].
func (b *redisBackend) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	m := (*Redis)(b)
	o := m.newOrder(kindHold, id, lines, driver.DirReduce)
	if err := m.begin(ctx, o, ttl, true); err != nil {
		return err
	}
	if err := m.takeLines(ctx, o, ttl.Milliseconds()); err != nil {
		return err
	}
	res, err := m.orderOp(ctx, o, "commit", o.nonce, "reserving", "held", m.times.grace.Milliseconds())
	if err != nil {
		return err // the record decides: its lines expire, and Sweep releases them
	}
	if res[0] != "ok" { // cancelled, or taken over, while it was made
		_ = m.endLines(ctx, o, "release")
		return inventory.ErrDuplicate
	}
	return nil
}

// hold returns the record of hold id as it stands: its state ("absent"
// when there is none) and its current attempt.
func (m *Redis) hold(ctx context.Context, id string) (string, *order, error) {
	o := m.newOrder(kindHold, id, nil, driver.DirReduce)
	res, err := m.orderOp(ctx, o, "peek")
	if err != nil || res[0] == "absent" {
		return "absent", o, err
	}
	if err := m.fromRecord(o, res); err != nil {
		return "", nil, err
	}
	return res[0], o, nil
}

// fromRecord sets o's nonce and lines from a reply {st, nonce, lines, ...}:
// none when the record is finished (its lines ended).
func (m *Redis) fromRecord(o *order, res []string) error {
	if len(res) < 3 {
		return fmt.Errorf("order record %s replied %v", o.rec, res)
	}
	if res[1] == "" {
		o.nonce, o.lines = "", nil
		return nil
	}
	lines, err := rediskeys.DecodeLines(res[2])
	if err != nil {
		return err
	}
	o.nonce, o.lines = res[1], lines
	return nil
}

// Confirm implements [front.Backend]: it pins every line (a line past its
// time is released instead, and the Confirm fails), then moves the record
// from held to confirmed, then sells the lines.
func (b *redisBackend) Confirm(ctx context.Context, id string) error {
	m := (*Redis)(b)
	st, o, err := m.hold(ctx, id)
	if err != nil {
		return err
	}
	switch st {
	case "absent":
		return inventory.ErrHoldNotFound
	case "reserving":
		return fmt.Errorf("%w: the Reserve of this hold has not finished", inventory.ErrContention)
	case "confirmed":
		return m.settled(ctx, o, "sell", errConfirmed)
	case "released":
		return m.settled(ctx, o, "release", inventory.ErrHoldReleased)
	}
	for i := range o.lines {
		r, err := m.lineOp(ctx, o, i, "pin")
		if err != nil {
			return err // pinned lines follow the record: Sweep ends them
		}
		if r != "ok" {
			return m.released(ctx, o)
		}
	}
	res, err := m.orderOp(ctx, o, "commit", o.nonce, "held", "confirmed", m.times.grace.Milliseconds())
	if err == nil && hook != nil && res[0] == "ok" {
		err = hook("confirmed")
	}
	if err != nil {
		return err
	}
	switch res[0] {
	case "ok":
		return m.settled(ctx, o, "sell", nil)
	case "confirmed":
		return m.settled(ctx, o, "sell", errConfirmed)
	}
	return m.settled(ctx, o, "release", inventory.ErrHoldReleased)
}

// released releases hold o, one of whose lines fell due before Confirm
// pinned it, and returns Confirm's error.
func (m *Redis) released(ctx context.Context, o *order) error {
	res, err := m.orderOp(ctx, o, "abort", o.nonce, "0", m.times.grace.Milliseconds())
	if err != nil {
		return err
	}
	if res[0] == "confirmed" { // a Confirm of the same hold won
		return m.settled(ctx, o, "sell", errConfirmed)
	}
	return m.settled(ctx, o, "release", inventory.ErrHoldReleased)
}

// settled ends the lines of o, whose record was decided, as how says,
// finishes the record, and returns ret; or the error of a line that could
// not be ended (Sweep ends it later).
func (m *Redis) settled(ctx context.Context, o *order, how string, ret error) error {
	if o.nonce == "" {
		return ret // finished
	}
	if how != "" {
		if err := m.endLines(ctx, o, how); err != nil {
			return err
		}
	}
	_, _ = m.orderOp(ctx, o, "finish", o.nonce, "")
	return ret
}

// Cancel implements [front.Backend].
func (b *redisBackend) Cancel(ctx context.Context, id string) error {
	m := (*Redis)(b)
	o := m.newOrder(kindHold, id, nil, driver.DirReduce)
	res, err := m.orderOp(ctx, o, "cancel", m.times.grace.Milliseconds())
	if err != nil {
		return err
	}
	switch res[0] {
	case "absent":
		return inventory.ErrHoldNotFound
	case "confirmed":
		return inventory.ErrHoldConfirmed
	}
	if err := m.fromRecord(o, res); err != nil {
		return err
	}
	return m.settled(ctx, o, "release", nil)
}

// Held implements [front.Backend]: the sum of the SKU's segments' held
// units, read as Get reads.
func (b *redisBackend) Held(ctx context.Context, sku string) (int64, error) {
	m := (*Redis)(b)
	cmds := make([]*redis.SliceCmd, m.n)
	_, err := m.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range m.n {
			cmds[i] = p.HMGet(ctx, m.segKey(sku, i), "a", "h")
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var held int64
	for _, c := range cmds {
		f := c.Val()
		if f[0] == nil {
			return 0, inventory.ErrNotFound
		}
		held += field(f[1])
	}
	return held, nil
}

// Sweep implements [front.Backend]: it looks at up to SweepBatch due
// records of each order bucket and ends those past their time (a hold
// past its TTL is released; a call or Confirm that died is finished), and
// returns how many holds it released.
func (b *redisBackend) Sweep(ctx context.Context) (int, error) {
	m := (*Redis)(b)
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	cmds := make([]*redis.StringSliceCmd, orderBuckets)
	_, err := m.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range orderBuckets {
			cmds[i] = p.ZRangeByScore(ctx, m.indexKey(i), &redis.ZRangeBy{Min: "-inf", Max: now, Count: SweepBatch})
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for i, c := range cmds {
		for _, rec := range c.Val() {
			released, err := m.sweepOne(ctx, &order{rec: rec, idx: m.indexKey(i)})
			if err != nil {
				return n, err
			}
			if released {
				n++
			}
		}
	}
	return n, nil
}

// sweepOne ends the record o.rec if it is due, and reports whether it
// released a hold.
func (m *Redis) sweepOne(ctx context.Context, o *order) (bool, error) {
	res, err := m.load(ctx, o)
	if err != nil || res == nil {
		return false, err
	}
	if st := res[0]; st == "confirmed" || st == "released" {
		return false, m.settled(ctx, o, decidedEnd(st, o), nil)
	}
	if res[5] != "1" {
		return false, nil
	}
	r, err := m.orderOp(ctx, o, "abort", o.nonce, "1", m.times.grace.Milliseconds())
	if err != nil || r[0] != "ok" || len(r) != 2 {
		return false, err
	}
	drop := ""
	if r[1] == "reserving" { // an attempt that died: it never held
		drop = "drop"
	}
	if err := m.endLines(ctx, o, "release"); err != nil {
		return false, err
	}
	_, err = m.orderOp(ctx, o, "finish", o.nonce, drop)
	return r[1] == "held" && o.kind == kindHold, err
}

// load reads the record o.rec into o (its attempt, lines, kind and
// direction), releases the lines of an attempt it took over that are not
// known released, and returns peek's reply, or nil when there is no
// record.
func (m *Redis) load(ctx context.Context, o *order) ([]string, error) {
	res, err := m.orderOp(ctx, o, "peek")
	if err != nil || res[0] == "absent" {
		return nil, err
	}
	if len(res) != 8 {
		return nil, fmt.Errorf("order record %s replied %v", o.rec, res)
	}
	if err := m.fromRecord(o, res); err != nil {
		return nil, err
	}
	o.kind, o.dir = res[3], driver.Direction(res[4])
	if res[6] != "" {
		if err := m.releaseOld(ctx, o, res[6], res[7]); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// decidedEnd is how the lines of o, whose record is in state st
// ("confirmed" or "released"), end: applied (a return), sold (a hold),
// left as they are (a reduce call's lines, taken), or released.
func decidedEnd(st string, o *order) string {
	switch {
	case st == "released":
		return "release"
	case o.dir == driver.DirReturn:
		return "apply"
	case o.kind == kindHold:
		return "sell"
	}
	return ""
}
