package segment

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/sqlstore"
)

// Redis is an [inventory.StockManager] and an [inventory.OrderManager]
// that keeps each SKU's stock in Redis, split over segment keys spread
// over the Cluster's slots, so that one hot SKU's calls spread over the
// Cluster's masters instead of all landing on one. It is safe for
// concurrent use. Create it with [NewRedis]; docs/segments.md (Redis)
// gives the design and the measured costs.
//
// # Layout
//
// Segment i of a SKU's n ([WithSegments], 8 by default) is a hash,
// PREFIX{tag}:gI:SKU, whose hash tag puts it at the i-th of n even steps
// around the slot space from the SKU's own slot: on a Cluster whose
// masters own equal runs of slots, the n segments spread evenly over them
// (8 segments on 3 masters: 3, 3 and 2). It holds the units available
// (a), the units out in transfers to another segment (o), and the
// transfers themselves. Init spreads the stock evenly; Get sums a + o
// over the segments.
//
// # A call
//
// A Reduce or Return runs on one segment, its home: the segment of its
// idempotency key (a hash of the key, the same in every process), or
// else the next of a rotation. It reads the other segments' units (one
// pipeline), then runs one script on its home's slot, which checks the
// key's record, moves the units and writes the record, all at once. A
// keyed call therefore always meets its own record: a keyed retry never
// applies twice. The calls of one segment that a Manager has in
// flight merge (as luascript's do): while one script call of the segment
// is in flight, those that arrive queue, and go together, up to 256, in
// one script call after one read of the others when it returns, each
// with its own outcome.
//
// A Reduce its home cannot fit borrows. It reads every segment; if the SKU
// as a whole cannot fit it, it is refused (a keyed one after a last look
// at its home, for its record). An unkeyed Reduce then takes its units
// from a segment that has them. Otherwise units move to the home in
// transfers, as a two-phase commit with the home deciding: each source's
// script moves units from a to o and records the transfer under an id;
// the home's script decides every transfer once (applied, or aborted) and,
// when applied, takes the call's units with them and writes its record, in
// one step; each source's script then settles its transfers (removes the
// applied units from o, or puts aborted ones back in a). A crash between
// the steps leaves transfers pending, their units still counted in o:
// [Redis.Recover], or any borrow or Get that finds them over a second
// old, decides them at their home (aborting what the home never applied)
// and settles them. No unit is lost or counted twice once settled.
//
// Returns need no borrowing: a segment holds any number of units. A
// Return is refused when the SKU's stock as read, plus its quantity,
// passes [inventory.MaxStock].
//
// # What a caller may rely on
//
// No oversell, and no false sold-out: a Reduce is refused only when the
// segments, read one by one and checked to have gained no units while
// being read (each segment counts its adds), cannot fit it, which means
// the SKU could not fit it at the end of that read; a Reduce larger than
// any one segment takes from several, all or nothing. A keyed call's
// record lives in its home's slot, written in the script that moves the
// stock: a retry with the same key is told [inventory.ErrDuplicate] with
// the first call's remaining value.
//
// The remaining value of a successful call is its home segment after it
// plus the other segments as read just before it: exact when no call
// overlaps it, at least 0, and below the stock before the call when no
// Return or Init overlaps it; but not linearizable (the conformance suite
// runs with inventorytest.Config.RemainingNotLinearizable). Get is not a
// snapshot on a Cluster: it reads the segments one by one (one pipeline
// per master), again until they gained no units meanwhile (at most 8
// reads, then it takes the last), and settles transfers left over a
// second old; it is exact when no call overlaps it,
// and while borrows are in flight it may count the units of a transfer
// its home applied and its source has not yet settled (an overcount of at
// most the units in flight, for a round trip).
//
// Concurrent Returns that each fit, near MaxStock, may together pass it
// (each is checked against the stock read before it); each segment stays
// within it. Init is not atomic across segments: run it before calls of
// the SKU, not during them (an Init during a borrow may let the borrow
// keep units from before the Init). Managers sharing SKUs must use the
// same number of segments and prefix. The records of transfer decisions
// live as long as idempotency records ([WithKeyTTL]).
//
// # Orders
//
// An order (a hold, or a lines call of several lines or with a key) is a
// record, in one of 16 order buckets (a hash of its id picks one; each
// bucket is one slot, with an index of its records by when Sweep should
// look at them), and one line per SKU. A line is a keyed Reduce on the
// SKU's segments, as above (borrowing when its home cannot fit it), whose
// key derives from the attempt's nonce and the line's index; its record,
// in its home's slot, says where the line stands. A held line's units are
// counted in its home's held units (Held sums them) and fall due on the
// home's clock at the hold's TTL: any call that reads the segment (a
// Reduce, a borrow, Get) releases the lines that fell due, so a Reduce
// after a hold expired finds its units. Lines are taken one by one: a
// line refused gives back the lines before it (and the call is refused
// with that line's shortfall), so a buyer meanwhile may be refused units
// that come back an instant later; never the other way round.
//
// The record decides. Reserve begins the record (reserving), takes the
// lines, then moves it to held; Confirm pins every line (a pinned line no
// longer falls due; one that fell due is released, and Confirm fails with
// ErrHoldReleased), moves the record from held to confirmed, then marks
// the lines sold; Cancel, and Sweep for a hold past its TTL, move it from
// held to released and give the lines back. Each move is one script on
// the record, so of a Confirm, a Cancel and an expiry exactly one wins. A
// release of a line that was never taken leaves the line void, so that
// its take, should it arrive late, takes nothing. A Reserve that died is
// taken over at once by a retry with the same id and lines, and is given
// back by Sweep [LinesTTL] after it began; a Confirm or Cancel that died
// is finished by Sweep [EndGrace] after it decided. ReduceLines takes its
// lines as a Reserve does (no TTL) and commits its record as confirmed;
// ReturnLines checks every SKU against MaxStock, commits, then gives the
// lines back. A keyed lines call whose attempt is under way, or died
// within LinesTTL, is refused with ErrContention; its key is free again
// once Sweep gave back a dead attempt's lines.
//
// Memory: a hold's record lives until the hold ends and then for the key
// TTL, with its state alone; a line's record until it ends and then 10 s.
// With [WithReplicas], every write of an order (the record's steps, a
// line's take, pin, sale or release) waits for the replicas; fewer is an
// error whose outcome is unknown: retry with the same hold id or key.
type Redis struct {
	redisConfig // the prefix, and the replicas a write waits for (0: none)
	face        front.Front
	client      redis.UniversalClient
	n           int
	ttlMs       int64
	next        atomic.Uint64                                    // the rotation of unkeyed calls over segments
	queue       *merge.Queue[redisCall, redisAnswer]             // the unkeyed calls of each segment in flight (redis_merge.go)
	reads       *merge.Keyed[string, struct{}, struct{}, shared] // the reads of each SKU's segments wanted (collect)
	times       orderTimes                                       // LinesTTL and EndGrace (redis_orders.go)
}

var (
	_ inventory.StockManager = (*Redis)(nil)
	_ inventory.OrderManager = (*Redis)(nil)
)

// WithPrefix sets the prefix of every key a [Redis] writes: 1 to 64 bytes
// of UTF-8 without braces or control characters, "inv" by default. New
// ignores it.
func WithPrefix(p string) Option { return func(c *config) { c.redis.prefix = p } }

// redisConfig is the options of [NewRedis] alone: WithPrefix and
// WithReplicas.
type redisConfig struct {
	prefix      string
	replicas    int
	replicaTO   time.Duration
	replicasSet bool
}

// WithReplicas makes every write of a [Redis] wait, with WAIT n timeout on
// its connection, until n replicas have it before the Manager goes on: a
// segment's Init, a Reduce or Return that moved stock or found its key,
// and each step of a borrow that decides (a transfer leaving its source,
// the home applying or aborting it). n must be at least 1 and timeout at
// least a millisecond. When fewer than n acknowledge within timeout the
// call returns an error wrapping [rediskeys.ErrReplicas] and neither
// sentinel: Redis applied the write, but whether it survives a failover is
// unknown; retry with the same idempotency key, which returns
// ErrDuplicate instead of moving stock twice. A borrow stopped so leaves
// its transfers pending, settled later as after a crash. The settling of a
// transfer at its source does not wait: lost in a failover, it is settled
// again from its decision, which did. WAIT does not fsync, and protects
// only when failover promotes a replica that has the write. New (SQL)
// refuses this option.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.redis.replicas, c.redis.replicaTO, c.redis.replicasSet = n, timeout, true }
}

// NewRedis returns a Redis Manager over client (a plain, Sentinel or
// Cluster client; Redis 7.0 or later). Its options are [WithSegments],
// [WithKeyTTL], [WithPrefix] and [WithReplicas]; [WithSchema] is refused. It does no I/O.
// Errors wrap [inventory.ErrInvalidArgument].
func NewRedis(client redis.UniversalClient, opts ...Option) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: %s: nil Redis client", inventory.ErrInvalidArgument, pkg)
	}
	c := config{ttl: inventory.DefaultKeyTTL, n: DefaultSegments, redis: redisConfig{prefix: rediskeys.DefaultPrefix}}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.n < 1 || c.n > MaxSegments {
		return nil, fmt.Errorf("%s: %w: %d segments, want 1..%d", pkg, inventory.ErrInvalidArgument, c.n, MaxSegments)
	}
	if c.schema != (sqlstore.Schema{}) {
		return nil, fmt.Errorf("%s: %w: WithSchema names SQL tables; NewRedis takes WithPrefix", pkg, inventory.ErrInvalidArgument)
	}
	r := c.redis
	if err := rediskeys.ValidateOptions(pkg, r.prefix, c.ttl, r.replicasSet, r.replicas, r.replicaTO); err != nil {
		return nil, err
	}
	m := &Redis{redisConfig: r, client: client, n: c.n, ttlMs: c.ttl.Milliseconds(), times: orderTimes{LinesTTL, EndGrace}}
	m.next.Store(rand.Uint64())
	m.queue = m.newQueue()
	m.reads = merge.NewKeyed(1<<20, func(ctx context.Context, sku string, _ *struct{}, batch []*merge.Call[struct{}, shared]) {
		w, err := m.collectNow(ctx, sku)
		for _, c := range batch {
			c.Ans = shared{w, err}
		}
	})
	m.face = front.New(pkg, (*redisBackend)(m), nil)
	return m, nil
}

// Init implements [inventory.StockManager]: it sets the SKU's segments to
// qty spread evenly.
func (m *Redis) Init(ctx context.Context, sku string, qty int64) error {
	return m.face.Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager]: the sum of the SKU's segments
// (see [Redis] for what it holds while calls are in flight).
func (m *Redis) Get(ctx context.Context, sku string) (int64, error) {
	return m.face.Get(ctx, sku)
}

// Reduce implements [inventory.StockManager].
func (m *Redis) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.face.Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (m *Redis) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.face.Return(ctx, sku, qty, opts...)
}

// ReduceLines implements [inventory.OrderManager]: see [Redis] "Orders".
func (m *Redis) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.face.ReduceLines(ctx, lines, opts...)
}

// ReturnLines implements [inventory.OrderManager].
func (m *Redis) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.face.ReturnLines(ctx, lines, opts...)
}

// Reserve implements [inventory.OrderManager].
func (m *Redis) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return m.face.Reserve(ctx, id, lines, ttl)
}

// Confirm implements [inventory.OrderManager].
func (m *Redis) Confirm(ctx context.Context, id string) error { return m.face.Confirm(ctx, id) }

// Cancel implements [inventory.OrderManager].
func (m *Redis) Cancel(ctx context.Context, id string) error { return m.face.Cancel(ctx, id) }

// Held implements [inventory.OrderManager]: the sum of the held units of
// the SKU's segments, read one by one (see [Redis] "Orders").
func (m *Redis) Held(ctx context.Context, sku string) (int64, error) { return m.face.Held(ctx, sku) }

// Sweep implements [inventory.OrderManager].
func (m *Redis) Sweep(ctx context.Context) (int, error) { return m.face.Sweep(ctx) }

// Recover settles every transfer of sku still pending (a borrowing call
// that crashed, or lost its connection, between its steps): each is
// decided at its destination, which aborts it unless it was applied, and
// settled at its source. It returns how many it settled. A borrow in
// flight meanwhile may see its transfers aborted; it then tries again.
// A borrow that finds units stuck in transfers, and Get, do the same on
// their own for transfers over a second old.
func (m *Redis) Recover(ctx context.Context, sku string) (int, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, &front.Error{Strategy: pkg, Op: "recover", Err: err}
	}
	n, err := m.resolve(ctx, sku, nil, 0)
	if err != nil {
		return n, &front.Error{Strategy: pkg, Op: "recover", Subject: sku, Err: err}
	}
	return n, nil
}

//go:embed redis_take.lua
var takeLua string

//go:embed redis_depart.lua
var departLua string

//go:embed redis_arrive.lua
var arriveLua string

//go:embed redis_settle.lua
var settleLua string

//go:embed redis_decide.lua
var decideLua string

//go:embed redis_init.lua
var initLua string

var (
	takeScript   = rediskeys.NewScript(holdsLua + takeLua)
	departScript = rediskeys.NewScript(departLua)
	arriveScript = rediskeys.NewScript(holdsLua + arriveLua)
	settleScript = rediskeys.NewScript(settleLua)
	decideScript = rediskeys.NewScript(decideLua)
	initScript   = rediskeys.NewScript(initLua)
)

// The codes of redis_take.lua and redis_arrive.lua.
const (
	codeMoved = iota
	codeMiss
	codeNotFound
	codeDuplicate
	codeOverflow
)

// segKey is the key of segment i of sku: PREFIX{tag}:gI:SKU.
func (m *Redis) segKey(sku string, i int) string {
	return m.prefix + rediskeys.SegmentTag(sku, i, m.n) + ":g" + strconv.Itoa(i) + ":" + sku
}

// recKey is the record of key, for a call in direction dir, in segment
// i's slot: PREFIX{tag}:k:DIR:LEN:SKU:KEY.
func (m *Redis) recKey(sku string, i int, dir driver.Direction, key string) string {
	return m.prefix + rediskeys.SegmentTag(sku, i, m.n) + ":k:" + string(dir) + ":" + strconv.Itoa(len(sku)) + ":" + sku + ":" + key
}

// decisionKey is the decision on transfer id, in its destination segment
// i's slot: PREFIX{tag}:x:LEN:SKU:ID.
func (m *Redis) decisionKey(sku string, i int, id string) string {
	return m.prefix + rediskeys.SegmentTag(sku, i, m.n) + ":x:" + strconv.Itoa(len(sku)) + ":" + sku + ":" + id
}

// home is the segment of a call: its key's, or the rotation's next.
func (m *Redis) home(key string) int {
	if key == "" {
		return int(m.next.Add(1) % uint64(m.n))
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(m.n))
}

// redisBackend is the Redis Manager seen by its front.
type redisBackend Redis

// Init implements [front.Backend].
func (b *redisBackend) Init(ctx context.Context, sku string, qty int64) error {
	m := (*Redis)(b)
	base, extra := qty/int64(m.n), qty%int64(m.n)
	for i := range m.n {
		share := base
		if int64(i) < extra {
			share++
		}
		if _, err := m.write(ctx, initScript, []string{m.segKey(sku, i)}, share); err != nil {
			return err
		}
	}
	return nil
}

// Get implements [front.Backend].
func (b *redisBackend) Get(ctx context.Context, sku string) (int64, error) {
	m := (*Redis)(b)
	w, err := m.glance(ctx, sku)
	if err != nil {
		return 0, err
	}
	if w.out() > 0 {
		n, err := m.resolve(ctx, sku, &w, staleAfter)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			if w, err = m.glance(ctx, sku); err != nil {
				return 0, err
			}
		}
	}
	return w.total(), nil
}

// glance is collect for Get: while units keep being added to the
// segments (Returns, releases of held lines), so that no two reads agree,
// it settles for the last read, whose sum is off by at most the units
// that moved while it was read.
func (m *Redis) glance(ctx context.Context, sku string) (view, error) {
	w, err := m.collect(ctx, sku)
	if !errors.Is(err, inventory.ErrContention) {
		return w, err
	}
	if w, err = m.read(ctx, sku); err != nil {
		return view{}, err
	}
	for _, ok := range w.found {
		if !ok {
			return view{}, inventory.ErrNotFound
		}
	}
	return w, nil
}

// Move implements [front.Backend].
func (b *redisBackend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	m := (*Redis)(b)
	return m.move(ctx, redisCall{sku: sku, s: m.home(key), q: signedQty(qty, dir), key: key, dir: dir})
}

// move runs call c on its home segment, borrowing when the home cannot
// fit it.
func (m *Redis) move(ctx context.Context, c redisCall) (int64, error) {
	code, val, err := m.merged(ctx, c)
	if err == nil && code == codeMiss {
		return m.borrow(ctx, c)
	}
	return m.outcome(code, val, max(c.q, -c.q), c.dir, c.key, err)
}

// outcome is a call's result from a script's code and value.
func (m *Redis) outcome(code, val, qty int64, dir driver.Direction, key string, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	switch code {
	case codeMoved:
		return val, nil
	case codeMiss:
		return val, fmt.Errorf("%w: has %d, asked %d", inventory.ErrInsufficientStock, val, qty)
	case codeNotFound:
		return 0, inventory.ErrNotFound
	case codeDuplicate:
		return val, fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
	case codeOverflow:
		return val, driver.CheckReturn(val, qty)
	}
	return 0, fmt.Errorf("unknown script code %d (%s)", code, dir)
}

// signedQty is qty as the scripts take it: negative for a Return.
func signedQty(qty int64, dir driver.Direction) int64 {
	if dir == driver.DirReturn {
		return -qty
	}
	return qty
}

// take runs call c, with the other segments' units read first unless w
// gives them.
func (m *Redis) take(ctx context.Context, c redisCall, w *view) (code, val int64, err error) {
	res, err := m.run(ctx, []redisCall{c}, w)
	if err != nil {
		return 0, 0, err
	}
	return res[0].code, res[0].val, res[0].err
}

// run runs redis_take.lua for calls, all on one segment of one SKU, with
// the other segments' units read first unless w gives them, and returns
// each call's answer: with WithReplicas, a call that moved stock or found
// its key fails when fewer replicas acknowledged the script than asked.
func (m *Redis) run(ctx context.Context, calls []redisCall, w *view) ([]redisAnswer, error) {
	sku, s := calls[0].sku, calls[0].s
	var others int64
	if w != nil {
		others = w.total() - w.a[s] - w.o[s]
	} else {
		var err error
		if others, err = m.others(ctx, sku, s); err != nil {
			return nil, err
		}
	}
	keys := []string{m.segKey(sku, s)}
	args := make([]any, 2, 2+3*len(calls))
	args[0], args[1] = others, m.ttlMs
	for _, c := range calls {
		rec := 0
		if c.key != "" {
			keys = append(keys, m.recKey(sku, s, c.dir, c.key))
			rec = len(keys)
		}
		args = append(args, c.q, rec, c.hold)
	}
	cmd, acked, err := takeScript.Run(ctx, m.client, m.replicas, m.replicaTO, keys, args...)
	if err != nil {
		return nil, err
	}
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2*len(calls) {
		err = fmt.Errorf("take script returned %d values for %d calls", len(res), len(calls))
	}
	if err != nil {
		return nil, err
	}
	short := m.short(acked)
	as := make([]redisAnswer, len(calls))
	for i := range as {
		as[i] = redisAnswer{code: res[2*i], val: res[2*i+1]}
		if as[i].code == codeMoved || as[i].code == codeDuplicate {
			as[i].err = short
		}
	}
	return as, nil
}

// write runs script s, a write, and with WithReplicas waits for the
// replicas: see [Redis.short].
func (m *Redis) write(ctx context.Context, s *rediskeys.Script, keys []string, args ...any) (*redis.Cmd, error) {
	cmd, acked, err := s.Run(ctx, m.client, m.replicas, m.replicaTO, keys, args...)
	if err == nil {
		err = m.short(acked)
	}
	return cmd, err
}

// short is the error of a write that fewer replicas acknowledged than
// WithReplicas asked for, or nil.
func (m *Redis) short(acked int64) error {
	if acked >= int64(m.replicas) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d within %v; the write is on the primary, whether it survives a failover is unknown (retry with the same key)",
		rediskeys.ErrReplicas, acked, m.replicas, m.replicaTO)
}

// others reads the units (a + o) of every segment of sku but s, in one
// pipeline (on a Cluster, one per master, concurrently), after releasing
// the held lines it finds due (see segFields).
func (m *Redis) others(ctx context.Context, sku string, s int) (int64, error) {
	if m.n == 1 {
		return 0, nil
	}
	vals, err := m.segFields(ctx, sku, s, "a", "o")
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, f := range vals {
		for _, v := range f {
			sum += field(v)
		}
	}
	return sum, nil
}

// segFields reads fields of every segment of sku but skip (-1: none), with
// each one's m, in one pipeline. When it finds segments whose held lines
// fell due, it releases them (so that the call that saw them finds their
// units) and reads once more. It returns each segment's values of fields,
// nil for skip.
func (m *Redis) segFields(ctx context.Context, sku string, skip int, fields ...string) ([][]any, error) {
	withM := append(append(make([]string, 0, len(fields)+1), fields...), "m")
	for try := 0; ; try++ {
		cmds := make([]*redis.SliceCmd, m.n)
		_, err := m.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range m.n {
				if i != skip {
					cmds[i] = p.HMGet(ctx, m.segKey(sku, i), withM...)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		vals := make([][]any, m.n)
		var due []int
		for i, c := range cmds {
			if c == nil {
				continue
			}
			f := c.Val()
			vals[i] = f[:len(fields)]
			if isDue(f[len(fields)]) {
				due = append(due, i)
			}
		}
		if len(due) == 0 || try > 0 {
			return vals, nil
		}
		if err := m.releaseDue(ctx, sku, due); err != nil {
			return nil, err
		}
	}
}

// isDue reports whether a segment's field m, as HMGET returns it, says
// that some held line of the segment fell due, on this process's clock.
func isDue(m any) bool {
	s, ok := m.(string)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n <= time.Now().UnixMilli()
}

// releaseDue releases the held lines of sku's segments segs that fell due
// (redis_line.lua "due"), so that the call that saw them finds their units.
func (m *Redis) releaseDue(ctx context.Context, sku string, segs []int) error {
	for _, i := range segs {
		if _, _, err := lineScript.Run(ctx, m.client, 0, 0, []string{m.segKey(sku, i)}, "due", m.ttlMs); err != nil {
			return err
		}
	}
	return nil
}

// field is the integer value of a hash field as HMGET returns it, 0 when
// absent.
func field(f any) int64 {
	s, _ := f.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// view is what one read of every segment of a SKU saw: per segment, its
// units available (a), out in transfers (o), its count of adds (v), and
// whether it exists. It may be shared by several calls: read only.
type view struct {
	a, o, v []int64
	found   []bool
	// claimed counts the units the borrows sharing the view mean to take
	// from it (see borrow), so that no more of them go for its units than
	// it saw.
	claimed *atomic.Int64
}

func (w *view) total() int64 {
	var t int64
	for i := range w.a {
		t += w.a[i] + w.o[i]
	}
	return t
}

func (w *view) avail() int64 {
	var t int64
	for _, a := range w.a {
		t += a
	}
	return t
}

func (w *view) out() int64 {
	var t int64
	for _, o := range w.o {
		t += o
	}
	return t
}

// read reads every segment of sku in one pipeline, after releasing the
// held lines it finds due (see segFields).
func (m *Redis) read(ctx context.Context, sku string) (view, error) {
	vals, err := m.segFields(ctx, sku, -1, "a", "o", "v")
	if err != nil {
		return view{}, err
	}
	w := view{a: make([]int64, m.n), o: make([]int64, m.n), v: make([]int64, m.n), found: make([]bool, m.n),
		claimed: new(atomic.Int64)}
	for i, f := range vals {
		w.found[i] = f[0] != nil
		w.a[i], w.o[i], w.v[i] = field(f[0]), field(f[1]), field(f[2])
	}
	return w, nil
}

// collectTries bounds how often collect reads the segments.
const collectTries = 8

// shared is the answer of a read shared by the borrows and Gets of a SKU.
type shared struct {
	w   view
	err error
}

// collect is collectNow shared: the reads of sku that a Manager's calls
// ask for while one is in flight wait for it to end, and share the next
// one, which starts after they asked (so that it still says what the SKU
// held during each of their calls).
func (m *Redis) collect(ctx context.Context, sku string) (view, error) {
	a, err := m.reads.Do(ctx, sku, struct{}{})
	if err != nil {
		return view{}, err
	}
	return a.w, a.err
}

// collectNow reads every segment of sku until two reads in a row saw the same
// count of adds in each, and returns the first of the two: then no units
// were added to any segment between its read and the end of that read, so
// that the SKU had at most the sum read (a + o) at its end. It fails with
// ErrNotFound when a segment is absent, and with ErrContention when units
// kept being added.
func (m *Redis) collectNow(ctx context.Context, sku string) (view, error) {
	prev, err := m.read(ctx, sku)
	if err != nil {
		return view{}, err
	}
	for range collectTries {
		for _, ok := range prev.found {
			if !ok {
				return view{}, inventory.ErrNotFound
			}
		}
		cur, err := m.read(ctx, sku)
		if err != nil {
			return view{}, err
		}
		same := true
		for i := range cur.v {
			same = same && cur.v[i] == prev.v[i]
		}
		if same {
			return prev, nil
		}
		prev = cur
	}
	return view{}, fmt.Errorf("%w: units kept being added while the segments were read", inventory.ErrContention)
}
