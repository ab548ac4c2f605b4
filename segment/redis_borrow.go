package segment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// borrowTries bounds the rounds of a borrowing Reduce (each: a read of
// the segments, then a take or a transfer) before it gives up with
// ErrContention, nothing taken.
const borrowTries = 100

// staleAfter is the age past which a refusal or Get settles a pending
// transfer itself (see [Redis.Recover]): a live borrow settles its own
// within a few round trips.
const staleAfter = time.Second

// hook, when set (tests), runs after each step of a transfer, "departed"
// and "arrived"; an error ends the call there with that error, as a crash
// would.
var hook func(step string) error

// borrow is a Reduce, c, that its home segment could not fit: see [Redis]
// "A call".
func (m *Redis) borrow(ctx context.Context, c redisCall) (int64, error) {
	sku, s, qty, key := c.sku, c.s, c.q, c.key
	for try := range borrowTries {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		w, err := m.collect(ctx, sku)
		if err != nil {
			return 0, err
		}
		if w.total() < qty {
			return m.refuse(ctx, c, &w)
		}
		var code, val int64
		switch j := w.fits(qty); {
		case w.avail() < qty: // units are in transfers: wait for them, or settle the stale ones
			if err := m.await(ctx, sku, &w, try); err != nil {
				return 0, err
			}
			continue
		case w.claimed.Add(qty) > w.avail(): // the borrows sharing w claimed its units: read again
			if err := pause(ctx, try); err != nil {
				return 0, err
			}
			continue
		case w.a[s] >= qty: // the home was refilled meanwhile
			code, val, err = m.take(ctx, c, &w)
		case key == "" && j >= 0:
			code, val, err = m.take(ctx, redisCall{sku: sku, s: j, q: qty, dir: driver.DirReduce}, &w)
		default:
			code, val, err = m.transfer(ctx, c, &w)
		}
		if err != nil || code != codeMiss {
			return m.outcome(code, val, qty, driver.DirReduce, key, err)
		}
	}
	return 0, fmt.Errorf("%w: %d rounds of borrowing between segments, nothing taken", inventory.ErrContention, borrowTries)
}

// await settles the stale transfers of the segments w saw units out in,
// or, when none is stale, waits a little (round try of a borrow) for the
// live ones to settle.
func (m *Redis) await(ctx context.Context, sku string, w *view, try int) error {
	n, err := m.resolve(ctx, sku, w, staleAfter)
	if err == nil && n == 0 {
		err = pause(ctx, try)
	}
	return err
}

// fits returns a segment whose available units fit qty, or -1.
func (w *view) fits(qty int64) int {
	for i, a := range w.a {
		if a >= qty {
			return i
		}
	}
	return -1
}

// refuse is a Reduce, c, that the segments read in w cannot fit: refused,
// unless (keyed) a last look at its home finds its record, or finds that
// the home fits it now.
func (m *Redis) refuse(ctx context.Context, c redisCall, w *view) (int64, error) {
	total := w.total()
	if c.key != "" {
		// merged: at a sell-out, the refusals of a segment go together
		code, val, err := m.merged(ctx, c)
		if err != nil || code != codeMiss {
			return m.outcome(code, val, c.q, driver.DirReduce, c.key, err)
		}
	}
	return m.outcome(codeMiss, total, c.q, driver.DirReduce, c.key, nil)
}

// pause waits a little before round try+1 of a borrow, or returns ctx's
// error.
func pause(ctx context.Context, try int) error {
	t := time.NewTimer(time.Duration(min(try+1, 20)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sent is one transfer of a borrow: its id, source segment and units.
type sent struct {
	id  string
	src int
	x   int64
}

// transfer moves the units the home s lacks for a Reduce c of qty from
// the other segments w saw them in, then has s decide the transfers and
// take the call's units with them, then settles the transfers at their
// sources. It returns redis_arrive.lua's code and value: codeMiss when
// the units ran out meanwhile (every transfer aborted, nothing taken).
func (m *Redis) transfer(ctx context.Context, c redisCall, w *view) (code, val int64, err error) {
	sku, s, qty, key := c.sku, c.s, c.q, c.key
	ts, err := m.depart(ctx, sku, s, qty-w.a[s], w)
	if err != nil || len(ts) == 0 {
		return codeMiss, 0, err
	}
	if hook != nil {
		if err := hook("departed"); err != nil {
			return 0, 0, err
		}
	}
	rec := m.segKey(sku, s)
	if key != "" {
		rec = m.recKey(sku, s, driver.DirReduce, key)
	}
	keys := []string{m.segKey(sku, s), rec}
	got := int64(0)
	args := []any{qty, 0, m.ttlMs, c.hold}
	for _, t := range ts {
		keys = append(keys, m.decisionKey(sku, s, t.id))
		args = append(args, t.x)
		got += t.x
	}
	args[1] = w.total() - w.a[s] - w.o[s] - got
	cmd, err := m.write(ctx, arriveScript, keys, args...)
	if err != nil { // applied or not, unknown (or not yet on the replicas): a recovery settles the transfers
		return 0, 0, err
	}
	res, err := cmd.Slice()
	if err != nil || len(res) != 2+len(ts) {
		return 0, 0, fmt.Errorf("unexpected arrive reply %v (%v)", cmd.Val(), err)
	}
	code, _ = res[0].(int64)
	val, _ = res[1].(int64)
	if hook != nil {
		if err := hook("arrived"); err != nil {
			return 0, 0, err
		}
	}
	decided := make([]string, len(ts))
	for i := range ts {
		decided[i], _ = res[2+i].(string)
	}
	_ = m.settle(ctx, sku, ts, decided) // on failure a recovery settles them; the call's outcome stands
	return code, val, nil
}

// depart moves up to need units out of the other segments w saw them in,
// starting at a random one (borrowers of one SKU start apart), in
// transfers to segment s, and returns the transfers that moved any.
func (m *Redis) depart(ctx context.Context, sku string, s int, need int64, w *view) ([]sent, error) {
	var ts []sent
	now := time.Now().UnixMilli()
	first := rand.IntN(m.n)
	for k := 0; k < m.n && need > 0; k++ {
		j := (first + k) % m.n
		if j == s || w.a[j] <= 0 {
			continue
		}
		t := sent{id: rediskeys.NewNonce(), src: j}
		cmd, acked, err := departScript.Run(ctx, m.client, m.replicas, m.replicaTO, []string{m.segKey(sku, j)},
			min(w.a[j], need), t.id, s, now)
		if err == nil {
			t.x, err = cmd.Int64()
		}
		if err == nil && t.x > 0 {
			ts = append(ts, t)
			need -= t.x
			err = m.short(acked)
		}
		if err != nil { // a transfer whose outcome is unknown is left to a recovery
			m.abort(ctx, sku, s, ts)
			return nil, err
		}
	}
	return ts, nil
}

// abort aborts the transfers ts to segment s and settles them, as far as
// it can: a recovery does the rest.
func (m *Redis) abort(ctx context.Context, sku string, s int, ts []sent) {
	if len(ts) == 0 {
		return
	}
	decided, err := m.decide(ctx, sku, s, ts)
	if err == nil {
		_ = m.settle(ctx, sku, ts, decided)
	}
}

// decide decides the transfers ts at their destination s, aborting those
// it has not decided, and returns each one's decision.
func (m *Redis) decide(ctx context.Context, sku string, s int, ts []sent) ([]string, error) {
	keys := make([]string, len(ts))
	for i, t := range ts {
		keys[i] = m.decisionKey(sku, s, t.id)
	}
	cmd, err := m.write(ctx, decideScript, keys, m.ttlMs)
	if err != nil {
		return nil, err
	}
	d, err := cmd.StringSlice()
	if err == nil && len(d) != len(ts) {
		err = fmt.Errorf("decide returned %d decisions for %d transfers", len(d), len(ts))
	}
	return d, err
}

// settle settles the transfers ts, decided as decided says, at their
// sources. It does not wait for WithReplicas's replicas: a settling lost
// in a failover leaves the transfer pending, settled again from its
// decision, which did wait.
func (m *Redis) settle(ctx context.Context, sku string, ts []sent, decided []string) error {
	by := map[int][]any{}
	for i, t := range ts {
		by[t.src] = append(by[t.src], t.id, decided[i])
	}
	for src, args := range by {
		if _, _, err := settleScript.Run(ctx, m.client, 0, 0, []string{m.segKey(sku, src)}, args...); err != nil {
			return err
		}
	}
	return nil
}

// resolve settles the pending transfers of sku over minAge old: of the
// segments w saw units out in, or of every segment when w is nil. It
// returns how many it settled.
func (m *Redis) resolve(ctx context.Context, sku string, w *view, minAge time.Duration) (int, error) {
	now := time.Now().UnixMilli()
	n := 0
	for j := range m.n {
		if w != nil && w.o[j] == 0 {
			continue
		}
		fields, err := m.client.HGetAll(ctx, m.segKey(sku, j)).Result()
		if err != nil {
			return n, err
		}
		to := map[int][]sent{} // the stale transfers out of j, by destination
		for f, rec := range fields {
			id, ok := strings.CutPrefix(f, "i:")
			var x, dest, at int64
			if _, err := fmt.Sscan(rec, &x, &dest, &at); !ok || err != nil || minAge > 0 && now-at < minAge.Milliseconds() {
				continue
			}
			to[int(dest)] = append(to[int(dest)], sent{id: id, src: j, x: x})
		}
		for dest, ts := range to {
			decided, err := m.decide(ctx, sku, dest, ts)
			if err == nil {
				err = m.settle(ctx, sku, ts, decided)
			}
			if err != nil {
				return n, err
			}
			n += len(ts)
		}
	}
	return n, nil
}
