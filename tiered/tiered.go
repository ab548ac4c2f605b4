// Package tiered keeps the stock of record in SQL and serves the hot path
// from Redis, without ever selling a unit twice as long as Redis does not
// come back older than what it acknowledged (see Durability).
//
// # Layout
//
// SQL holds, per SKU, the pool of units not allotted to Redis, the
// generation (how many times Init set the SKU), the sales synced from
// Redis, and the grants: bounded chunks of the pool handed to Redis, each
// with an id (1, 2, 3... per generation), recorded in the same transaction
// that takes its units out of the pool. Redis holds, per SKU, a hash under
// the SKU's hash tag with its allotment (the units it may sell), its view
// of the pool (never less than SQL's), the generation and the last grant
// id it applied: a grant applies once, whatever repeats its call. Redis
// sells only its allotment. A Reduce that leaves the allotment below the
// low-water mark asks, in the same script, for a refill, which the Manager
// runs in the background, so that a hot SKU does not stall waiting for it;
// a Reduce that finds the allotment short while the pool may have units
// grants what it needs first and calls again.
//
// Every move in Redis is journaled, in the same script, in the SKU's
// journal, a Redis Stream under the SKU's hash tag: a call alone appends
// its own entry, a merged batch one entry per SKU with the units its moves
// sold and returned. [Manager.Sync] (or
// [Manager.Run] in a goroutine) reads the journal through a consumer group
// and applies each entry to SQL exactly once: the entry's id goes into a
// ledger table in the transaction that adds its units to the SKU's synced
// sales, and the entry is acknowledged (and deleted) only after the commit.
// [Manager.Drain] waits until SQL has every entry. The ledger keeps only
// the entries that may still be read from the journal: after each round,
// Sync deletes the rows older than the oldest entry left in the stream and
// records that point per SKU, so that an older entry sent again (by a
// Redis restored from an older state) is recognised and never applied
// twice.
//
// For every SKU, at every moment: SQL's pool + units granted + SQL's own
// net sales (see below) == the generation's initial stock, and Redis's allotment == granted - sold +
// returned (sold and returned counting the moves Redis made, synced or
// not). So SQL's pool, which is all SQL may ever sell on its own, never
// includes a unit Redis holds or sold: never an oversell.
//
// The remaining stock a call returns, and Get, are Redis's allotment plus
// its view of the pool.
//
// # Keys and tables
//
// Redis keys: PREFIX{tag}:s:SKU (the hash), PREFIX:j{tag}:s:SKU (the
// journal) and rediskeys' idempotency records under PREFIX. SQL tables:
// TABLEPREFIXstock, TABLEPREFIXgrants and TABLEPREFIXsynced, on MariaDB/MySQL
// (driver "mysql"), PostgreSQL ("pgx" or "postgres") or SQLite ("sqlite",
// modernc.org/sqlite, or "sqlite3"; in WAL mode with a busy timeout, as
// SQLite has one writer at a time); [Manager.CreateTables]
// creates them.
//
// # When Redis is unreachable
//
// A circuit breaker ([WithBreaker]) sends calls to SQL alone once Redis
// has failed 3 times in a row (by default): they sell only the pool, the
// units SQL never granted, and count them as the row's direct sales. The
// allotment Redis holds is out of reach meanwhile (a bounded undersell,
// never an oversell). After the open period (1 s by default) a recovery
// runs in the background while SQL keeps serving: it asks Redis whether it
// restarted meanwhile (its uptime) and reconciles the SKUs the fallback
// moved, or every SKU after a restart, so that a Redis that came back
// empty, or from an older state, or without grants SQL made, is repaired
// (allotment recorded lost, excess taken out, grants applied, view of the
// pool set to SQL's) before it takes traffic again; then the circuit
// closes. Keyed calls are refused while the circuit is open or recovering,
// and so are the order calls (see Orders).
//
// # Durability
//
// A move Redis acknowledged lives only in Redis (its state hash and its
// journal entry, written by one script) until the syncer commits it to
// SQL, so what a Redis failure loses is Redis's persistence policy's to
// say. TestDurability SIGKILLs a private Redis mid-sale, with about 100
// acknowledged moves not yet synced, restarts it, drains and reconciles:
//
//   - appendonly yes, with appendfsync always or no: a SIGKILL loses no
//     acknowledged move (Redis writes the append-only file before it
//     replies, and the kernel keeps what was written when the process
//     dies). The syncer catches up; Reconcile finds nothing lost or in
//     excess (at most a grant the kill cut between SQL and Redis, which it
//     applies). A call cut by the kill may have taken effect: retry it with
//     its idempotency key. With everysec the same, except when a fsync
//     takes more than a second (a busy disk): Redis then postpones its
//     writes for up to 2 s and keeps replying, and a SIGKILL loses that
//     tail, which is an older state (below). The soak sweep saw it once in
//     15 rounds on a loaded machine: 162 acknowledged moves lost, and sold
//     again.
//   - Power loss or a kernel crash, not simulated here, loses what the
//     kernel had not yet put on disk: nothing with appendfsync always (on a
//     disk that honours fsync); about the last second of moves with
//     everysec (up to two when a fsync is slow and Redis postpones its
//     writes); up to the kernel's writeback delay (about 30 s on Linux) with
//     no. Redis then comes back with an older state (below).
//   - appendonly no, no snapshot: Redis comes back empty. The unsynced
//     acknowledged moves are lost, and so is the allotment they sold from:
//     the SKU is warmed up with an empty allotment and Reconcile records
//     the allotment as lost, so nothing is sold twice (an undersell).
//     Measured: 111 of 319 acknowledged units forgotten, all inside the 192
//     units Reconcile recorded as lost.
//   - An older state (an RDB snapshot, an append-only file that lost its
//     tail to power loss, a replica promoted behind its primary): Redis
//     comes back with an allotment it has partly sold since. Reconcile takes
//     out of it what the syncer applied after that state (its Excess), but
//     the acknowledged moves that neither the restored state nor SQL holds
//     are remembered nowhere, and their units are sold again: an oversell of
//     at most the moves acknowledged after the restored state and not yet
//     synced (measured: 118 forgotten, 118 sold twice), and until Reconcile
//     runs, the synced ones besides. The Manager fences it: every new
//     connection asks Redis its run_id, and a Redis that restarted opens
//     the circuit before any call reaches it (restart.go); the recovery
//     then drops Redis's state of every SKU and re-warms it from SQL,
//     recording the allotment and holds Redis had as lost (a bounded
//     undersell: at most the allotments, a chunk or so per SKU). Issue
//     29's attack, reproduced by TestRestoredMidSale on a private Redis
//     (AOF copied after 80 sales, 120 more acknowledged and unsynced,
//     SIGKILL, restart from the copy): 0 oversold (120 before the watch,
//     with no call failing), 1 call refused, 220 units recorded lost. A
//     Manager that started after the restart cannot tell it, nor can one
//     whose client must AUTH before INFO: run Reconcile after restarting
//     Redis then, and prefer appendfsync always, no RDB restore into a
//     live sale. [WithTrustRestarts] reconciles instead of dropping, for
//     a Redis that never comes back older.
//
// # Not yet
//
// [Manager.Reconcile] compares grants, synced sales and Redis's allotment
// per SKU, reports the drift and repairs without ever creating a unit. The
// allotment of a Redis that lost its state is not reused (a bounded
// undersell, never an oversell): Reconcile records it as lost. Run it
// after a Redis restart the breaker did not see.
//
// # Merging
//
// Concurrent calls on the SKUs of one Cluster slot are merged, as
// luascript merges them ([WithMaxBatch]): a lone call goes to Redis at
// once, and the calls that arrive while a call is in flight go together
// when it returns, as one script call that applies each in order, journals
// the moves of each SKU as one entry and answers each call on its own.
// [WithReplicas] makes every move, alone or merged, wait for replicas
// (WAIT).
//
// # Orders
//
// Manager is an [inventory.OrderManager]. A hold lives in Redis: each of
// its lines is a part, a field of its SKU's state hash (holds.lua), whose
// units left the allotment when it was made; the hold's record, under the
// tag of its id, decides its fate (reserving, held, confirmed, released).
// Every part move (made, sold, released) is journaled in the same script
// as the move, with the units it took from the allotment, sold and held,
// and the syncer adds them to the SKU's row in SQL (sold, returned, held),
// so that once drained SQL has, per SKU,
// initial - available == sold - returned + held.
//
// Reserve creates the record with its deadline (Redis TIME + ttl), then
// holds each line in its SKU's slot (granting from SQL as a Reduce does);
// a refused line gives back the lines held before it and deletes the
// record, so a refused Reserve uses up nothing. Confirm pins every part (a
// pinned part no longer expires; an expired part cannot be pinned, so of
// a Confirm and the expiry exactly one wins), moves the record to
// confirmed, then sells the parts. Cancel moves the record to released
// first, then releases the parts; a Confirm that pinned meanwhile finds
// the record released and gives them back. A call that moves a SKU
// releases its expired parts first, in the same script; [Manager.Sweep]
// releases those of the SKUs nobody touches (a sweep index per Redis, or
// per Cluster slot), and settles, [PinGrace] after their TTL, the parts
// pinned by a Confirm that died, by the record. ReduceLines is a hold of
// its own ([LinesTTL]) confirmed at once (an unkeyed single line is a plain
// Reduce); ReturnLines checks every line against MaxStock, then returns
// each with an idempotency key of the call's, so that a keyed retry of a
// call that died midway finishes it. The lines of one call are not one
// atomic step, even on one Redis: each SKU moves in its own script, and
// the record makes the outcome all or nothing; a crash midway leaves only
// holds, which expire. A part takes a field in its SKU's hash until it is
// settled, and a record lives until its hold ends and then for the key TTL
// ([WithKeyTTL]).
//
// While the circuit to Redis is open, order calls (Reserve, Confirm,
// Cancel, the lines calls, Sweep) are refused with [ErrRedisUnreachable]
// and change nothing; Held answers SQL's synced figure. A hold stays in
// Redis meanwhile: its units are in neither SQL's pool nor Redis's
// allotment, so the fallback never sells them (never an oversell); one
// that expires during the outage is released by the first call or Sweep
// after recovery (no unit lost for good); a Confirm during the outage is
// refused, so it cannot race the expiry on two sides. A Redis that comes
// back empty loses its holds with its allotment: Reconcile counts their
// units as lost (an undersell), and their Confirm then fails with
// ErrHoldNotFound.
package tiered

import (
	"context"
	"crypto/rand"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// Defaults of the options.
const (
	DefaultPrefix        = "tiered"
	DefaultTablePrefix   = "tiered_"
	DefaultChunk         = 1000
	DefaultRefillTimeout = 5 * time.Second
	DefaultMaxAttempts   = 8
	DefaultSyncBatch     = 256
	DefaultSyncInterval  = 100 * time.Millisecond
	DefaultClaimIdle     = 30 * time.Second
	DefaultMaxBatch      = 256
)

// MaxBatch bounds [WithMaxBatch].
const MaxBatch = 1024

// group is the consumer group of the syncers.
const group = "tiered"

var (
	//go:embed holds.lua
	holdsLua string
	//go:embed move.lua
	moveFile string
	// moveLua is move.lua after the hold helpers it calls.
	moveLua = holdsLua + moveFile
	//go:embed apply.lua
	applyLua string
	//go:embed warm.lua
	warmLua string

	moveScript  = rediskeys.NewScript(moveLua)
	applyScript = rediskeys.NewScript(applyLua)
	warmScript  = rediskeys.NewScript(warmLua)
)

// Manager is an [inventory.StockManager] with the stock of record in SQL and
// the hot path in Redis. It is safe for concurrent use, also by several
// processes over the same Redis and database. Create it with [New]; Close
// it to stop its background refills.
type Manager struct {
	front.Front // Init, Get, Reduce, Return and the order calls

	rdb         redis.UniversalClient
	db          *sqlx.DB
	q           statements
	cfg         config
	consumer    string
	bg          context.Context
	stop        context.CancelFunc
	wg          sync.WaitGroup
	mu          sync.Mutex
	flights     map[string]chan struct{} // sku -> closed when its grant in flight ends
	demand      map[string]int64         // sku -> units asked for by calls waiting on its flight
	refillFails atomic.Int64
	stalls      atomic.Int64
	br          breaker
	fallbacks   atomic.Int64
	fb          *merge.Keyed[string, struct{}, fbReq, fbAns] // fallback.go: the SQL calls of each SKU
	queue       *merge.Queue[req, reply]                     // merge.go; nil when calls are not merged (WithMaxBatch(1))

	ledger ledgerState   // the synced-entry ledger's pruning (prune.go)
	watch  *restartWatch // restart.go

	// beforeAck, if set (tests), runs after a sync transaction commits
	// and before its entries are acknowledged; an error skips the
	// acknowledgement, as a syncer dying there would.
	beforeAck func() error
	// applied, if set (tests), is told the units sold and returned of the
	// entries each committed sync transaction let into the ledger.
	applied func(sold, returned int64)
}

type config struct {
	prefix, tablePrefix string
	chunk, lowWater     int64
	lowWaterSet         bool
	keyTTL, refillTO    time.Duration
	attempts            int
	syncBatch           int64
	syncInterval        time.Duration
	claimIdle           time.Duration
	onSyncErr           func(error)
	brFailures          int
	brOpen              time.Duration
	maxBatch            int
	replicas            int
	replicaTO           time.Duration
	replicasSet         bool
	trustRestarts       bool
}

// Option configures [New]. A nil Option is ignored; an out-of-range value
// makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithPrefix sets the prefix of the Redis keys (see rediskeys.ValidatePrefix
// for what it may be). The default is [DefaultPrefix].
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTablePrefix sets the prefix of the SQL table names: a letter or
// underscore, then letters, digits or underscores, 1 to 40 bytes. The
// default is [DefaultTablePrefix].
func WithTablePrefix(p string) Option { return func(c *config) { c.tablePrefix = p } }

// WithChunk sets the units SQL grants Redis at a time (more when one
// Reduce needs more), 1..MaxStock. The default is [DefaultChunk].
//
// Size the chunk, and the low-water mark ([WithLowWater]), for a SKU's
// peak rate: the units below the low-water mark must last while a
// background grant (one SQL transaction, then one script call) lands, or
// calls find the allotment empty and wait for it. In `make bench` on a
// 2-core machine, chunk 20,000 with low water 10,000 had no such wait at
// 108,000-207,000 calls/s on one SKU over MariaDB. A larger chunk keeps
// more units in Redis's allotment, which the fallback cannot sell while
// Redis is unreachable.
func WithChunk(n int64) Option { return func(c *config) { c.chunk = n } }

// WithLowWater sets the allotment below which a Reduce asks for the next
// chunk, 0..chunk (0: only when a Reduce finds it short). The default is a
// quarter of the chunk.
func WithLowWater(n int64) Option { return func(c *config) { c.lowWater, c.lowWaterSet = n, true } }

// WithKeyTTL sets how long idempotency keys are remembered, at least a
// millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.keyTTL = d } }

// WithRefillTimeout bounds a background refill; a refill request older
// than this lets another call ask again. At least a millisecond; the
// default is [DefaultRefillTimeout].
func WithRefillTimeout(d time.Duration) Option { return func(c *config) { c.refillTO = d } }

// WithMaxAttempts sets how many times a Reduce calls Redis, granting in
// between, before it gives up with [inventory.ErrContention]; at least 2.
// The default is [DefaultMaxAttempts].
func WithMaxAttempts(n int) Option { return func(c *config) { c.attempts = n } }

// WithSyncBatch sets how many journal entries of one SKU a sync
// transaction applies at most, 1..10000. The default is [DefaultSyncBatch].
func WithSyncBatch(n int) Option { return func(c *config) { c.syncBatch = int64(n) } }

// WithSyncInterval sets how long [Manager.Run] waits between syncs (each
// reads the journals to their end), so about how far SQL's synced sales
// trail Redis; positive. The default is [DefaultSyncInterval].
func WithSyncInterval(d time.Duration) Option { return func(c *config) { c.syncInterval = d } }

// WithClaimIdle sets how long a journal entry read by another syncer may
// stay unacknowledged before Sync takes it over (that syncer is taken to
// be dead); positive. The default is [DefaultClaimIdle].
func WithClaimIdle(d time.Duration) Option { return func(c *config) { c.claimIdle = d } }

// WithSyncErrors makes [Manager.Run] hand each failed sync's error to fn
// (Run carries on either way). The default drops them.
func WithSyncErrors(fn func(error)) Option { return func(c *config) { c.onSyncErr = fn } }

// WithMaxBatch sets how many concurrent calls at most are merged into one
// script call, 1..[MaxBatch]; 1 turns merging off, so that every call is
// its own script call. The default is [DefaultMaxBatch].
//
// Merging (as luascript's) only ever waits for a call already in flight: a
// lone call goes to Redis at once, and the calls that queue behind a call
// in flight on their Cluster slot go together when it returns, one round
// trip, one script run and one journal entry per SKU for all of them.
// Each call keeps its own outcome: its remaining stock, or
// ErrInsufficientStock when the calls before it in the batch left too
// little, ErrDuplicate when an earlier call (in the batch or before) used
// its key; a call that finds the allotment short grants, or finds no Redis
// state warms up, and then queues again, while the others are answered at
// once. When the script call fails, every call of the batch gets its error
// (its outcome unknown, as for a call alone). A caller whose ctx ends while
// queued leaves the queue, unsent, with ctx's error (nothing taken); one
// whose ctx ends after its batch was sent returns at once with ctx's error,
// its outcome unknown (its key makes a retry safe). A batch runs with the
// latest deadline of its calls, and counts once for the circuit breaker.
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// WithReplicas makes every move (a Reduce or Return that moved stock or
// found its key, alone or merged) and Init's write to Redis wait until n
// replicas have it, with WAIT n timeout on the same connection, before it
// is acknowledged, as luascript's and redisstore's WithReplicas do. n must
// be at least 1 and timeout at least a millisecond (WithReplicas(0, ...) is
// out of range too: leave the option out for no waiting). When fewer than n
// replicas acknowledge within timeout the call returns an error wrapping
// neither sentinel: Redis applied the move (and journalled it), but whether
// it survives a failover is unknown; retry it with the same idempotency
// key, which returns ErrDuplicate (after waiting again) instead of moving
// stock twice. Grants and warm-ups do not wait: what a failover loses of
// them is applied again from SQL. The default is no waiting. WAIT does not
// fsync, and makes a failover lose no acknowledged move only if it picks a
// replica that has it.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.replicaTO, c.replicasSet = n, timeout, true }
}

// WithTrustRestarts makes the recovery after a Redis restart reconcile
// every SKU (grants applied, excess taken out) instead of dropping Redis's
// state and re-warming it from SQL. Use it only where a restart never
// loses an acknowledged move (appendonly yes with appendfsync always, no
// restore of older data): a Redis that comes back older than it
// acknowledged then sells its forgotten sales again. The default drops.
func WithTrustRestarts() Option { return func(c *config) { c.trustRestarts = true } }

// New returns a Manager over rdb (any go-redis client, Cluster included) and
// db (MariaDB/MySQL, PostgreSQL or SQLite). Set ContextTimeoutEnabled on the
// go-redis client, so that a call's deadline bounds its wait for a hung
// Redis. Script calls are never resent by go-redis (internal/rediskeys
// Script: NoRetry), whatever its MaxRetries: a call whose connection
// breaks fails, its outcome unknown, and a keyed retry is safe. It checks the options and does no I/O;
// call [Manager.CreateTables] once to create the tables.
func New(rdb redis.UniversalClient, db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := config{
		prefix: DefaultPrefix, tablePrefix: DefaultTablePrefix, chunk: DefaultChunk,
		keyTTL: inventory.DefaultKeyTTL, refillTO: DefaultRefillTimeout, attempts: DefaultMaxAttempts,
		syncBatch: DefaultSyncBatch, syncInterval: DefaultSyncInterval, claimIdle: DefaultClaimIdle,
		brFailures: DefaultBreakerFailures, brOpen: DefaultBreakerOpen, maxBatch: DefaultMaxBatch,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if !c.lowWaterSet {
		c.lowWater = c.chunk / 4
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("tiered: %w: "+format, append([]any{inventory.ErrInvalidArgument}, a...)...)
	}
	switch {
	case rdb == nil || db == nil:
		return nil, bad("nil Redis client or database")
	case c.chunk < 1 || c.chunk > inventory.MaxStock:
		return nil, bad("chunk %d outside 1..%d", c.chunk, inventory.MaxStock)
	case c.lowWater < 0 || c.lowWater > c.chunk:
		return nil, bad("low-water mark %d outside 0..chunk %d", c.lowWater, c.chunk)
	case c.keyTTL < time.Millisecond:
		return nil, bad("key TTL %v below 1ms", c.keyTTL)
	case c.refillTO < time.Millisecond:
		return nil, bad("refill timeout %v below 1ms", c.refillTO)
	case c.attempts < 2:
		return nil, bad("max attempts %d below 2", c.attempts)
	case c.syncBatch < 1 || c.syncBatch > 10000:
		return nil, bad("sync batch %d outside 1..10000", c.syncBatch)
	case c.syncInterval <= 0 || c.claimIdle <= 0:
		return nil, bad("sync interval %v and claim idle %v must be positive", c.syncInterval, c.claimIdle)
	case c.brFailures < 1 || c.brOpen <= 0:
		return nil, bad("breaker of %d failures, open %v: want >= 1 and > 0", c.brFailures, c.brOpen)
	case c.maxBatch < 1 || c.maxBatch > MaxBatch:
		return nil, bad("WithMaxBatch(%d): want 1..%d", c.maxBatch, MaxBatch)
	case c.replicasSet && (c.replicas < 1 || c.replicaTO < time.Millisecond):
		return nil, bad("WithReplicas(%d, %v): want n >= 1 and a timeout of at least 1ms", c.replicas, c.replicaTO)
	case !identifier.MatchString(c.tablePrefix):
		return nil, bad("table prefix %q is not 1..40 bytes of letters, digits and underscores", c.tablePrefix)
	}
	if err := rediskeys.ValidatePrefix(c.prefix); err != nil {
		return nil, fmt.Errorf("tiered: %w", err)
	}
	q, err := engineSQL(db.DriverName(), c.tablePrefix)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 8)
	rand.Read(id)
	bg, stop := context.WithCancel(context.Background())
	m := &Manager{rdb: rdb, db: db, q: q, cfg: c, consumer: hex.EncodeToString(id), bg: bg, stop: stop,
		flights: map[string]chan struct{}{}, demand: map[string]int64{}}
	m.Front = front.New("tiered", backend{stock{m}, orders{m}}, nil)
	m.br.init(c.brFailures, c.brOpen, m.startRecovery)
	m.watch = watch(rdb, m)
	m.fb = merge.NewKeyed(maxFallbackBatch, m.fbApply)
	if c.maxBatch > 1 {
		m.queue = m.newQueue()
	}
	return m, nil
}

// CreateTables creates the SQL tables if they are absent.
func (m *Manager) CreateTables(ctx context.Context) error {
	for _, s := range m.q.create {
		if _, err := m.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("tiered: create tables: %w", err)
		}
	}
	return nil
}

// dropTables drops the tables (tests).
func (m *Manager) dropTables(ctx context.Context) error {
	for _, s := range m.q.drop {
		if _, err := m.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("tiered: drop tables: %w", err)
		}
	}
	return nil
}

// Close stops the background refills and waits for them. It closes
// neither client.
func (m *Manager) Close() error {
	m.watch.leave(m)
	m.stop()
	m.wg.Wait()
	return nil
}

// Stalls returns how many calls found Redis's allotment short while SQL
// may have had units, and waited for a grant before they could go on: the
// refills that did not come in time.
func (m *Manager) Stalls() int64 { return m.stalls.Load() }

// RefillFailures returns how many background refills failed (a later call
// asks again once the refill timeout has passed).
func (m *Manager) RefillFailures() int64 { return m.refillFails.Load() }

// backend is the Manager's front.Backend: its stock calls and its
// order calls (orders.go).
type backend struct {
	stock
	orders
}

// stock is the stock half of a Manager's front.Backend.
type stock struct{ m *Manager }

// Init sets the stock of sku to qty: in SQL, as a new generation whose pool
// is qty, then in Redis, fenced by that generation. Redis's allotment of
// the older generation is dropped, and its unsynced moves are ignored by the
// syncer. Idempotency keys are kept.
//
// If Init fails after SQL committed (Redis unreachable), Redis keeps
// selling the older allotment until a refill finds the newer generation;
// repeat the Init.
func (b stock) Init(ctx context.Context, sku string, qty int64) error {
	m := b.m
	var gen int64
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, m.q.initUpsert, sku, qty); err != nil {
			return err
		}
		if err := tx.QueryRowxContext(ctx, m.q.initGen, sku).Scan(&gen); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, m.q.initGrants, sku, gen)
		return err
	})
	if err != nil {
		return fmt.Errorf("tiered: init %q in SQL: %w", sku, err)
	}
	if _, err := m.warmWait(ctx, sku, gen, 0, qty, m.cfg.replicas); err != nil {
		return fmt.Errorf("tiered: init %q in Redis: %w", sku, err)
	}
	return nil
}

// Get returns Redis's allotment of sku plus its view of SQL's pool; while
// the circuit is open, SQL's pool alone.
func (b stock) Get(ctx context.Context, sku string) (int64, error) {
	m := b.m
	if m.br.open() {
		return m.getFallback(ctx, sku)
	}
	for range 2 {
		v, err := m.rdb.HMGet(ctx, m.stateKey(sku), "a", "p").Result()
		m.result(ctx, err)
		if err != nil {
			return 0, fmt.Errorf("tiered: get %q: %w", sku, withCtx(ctx, err))
		}
		if v[0] != nil && v[1] != nil {
			a, err1 := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
			p, err2 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return 0, fmt.Errorf("tiered: get %q: state hash: %w", sku, err)
			}
			return a + p, nil
		}
		if err := m.warm(ctx, sku); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("tiered: get %q: %w: Redis state vanished twice", sku, inventory.ErrContention)
}

// Move is the backend of Reduce and Return (see the package
// documentation): it takes qty units of sku from Redis's allotment, or
// gives them back, granting from SQL's pool when the allotment is short.
//
// While the circuit to Redis is open ([WithBreaker]), a Reduce takes from
// SQL's pool alone, the units never granted to Redis, and returns the pool
// as the remaining stock (a Return gives back to the pool); a keyed call
// is then refused with [ErrRedisUnreachable]. The call whose failure opened
// the circuit returns its Redis error (its outcome unknown): a call is
// never sent to both.
func (b stock) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	return b.m.move(ctx, sku, qty, dir, key)
}

func (m *Manager) move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("tiered: %s %q: %w", dir, sku, err)
	}
	c := req{sku: sku, key: key, qty: qty, dir: dir}
	stalled := false
	for range m.cfg.attempts {
		if m.br.open() {
			return m.fallback(ctx, sku, qty, dir, key)
		}
		r, err := m.send(ctx, c)
		if err == nil {
			err = r.err
		}
		if err != nil {
			return 0, fmt.Errorf("tiered: %s %q: %w", dir, sku, err)
		}
		switch r.code {
		case codeMoved:
			if r.w >= 0 {
				m.refill(sku, r.w)
			}
			if err := m.checkReplicas(r.acked); err != nil {
				return r.v, fmt.Errorf("tiered: %s %q: %w", dir, sku, err)
			}
			return r.v, nil
		case codeRefused:
			if dir == driver.DirReturn {
				return 0, fmt.Errorf("tiered: return %q: %w", sku, driver.CheckReturn(r.v, qty))
			}
			return r.v, fmt.Errorf("tiered: reduce %d of %q: %w", qty, sku, inventory.ErrInsufficientStock)
		case codeShort: // grant, then again
			if !stalled {
				stalled = true
				m.stalls.Add(1)
			}
			if err := m.grantShared(ctx, sku, qty-r.w, r.v); err != nil {
				return 0, err
			}
		case codeNoState: // warm up, then again
			if err := m.warm(ctx, sku); err != nil {
				return 0, err
			}
		case codeDuplicate:
			if err := m.checkReplicas(r.acked); err != nil {
				return r.v, fmt.Errorf("tiered: %s %q key %q: %w", dir, sku, key, err)
			}
			return r.v, fmt.Errorf("tiered: %s %q key %q: %w", dir, sku, key, inventory.ErrDuplicate)
		case codeNotHash:
			return 0, fmt.Errorf("tiered: %s %q: state key %s is not a hash", dir, sku, m.stateKey(sku))
		case codeOpen: // not sent: the circuit opened while the call queued
			return m.fallback(ctx, sku, qty, dir, key)
		default:
			return 0, fmt.Errorf("tiered: %s %q: script replied %+v", dir, sku, r)
		}
	}
	return 0, fmt.Errorf("tiered: %s %q: %w: allotment short after %d attempts", dir, sku, inventory.ErrContention, m.cfg.attempts)
}

// refill grants sku the next chunk in the background, unless this process
// already grants sku.
func (m *Manager) refill(sku string, g int64) {
	m.mu.Lock()
	if _, busy := m.flights[sku]; busy || m.bg.Err() != nil {
		m.mu.Unlock()
		return
	}
	done := make(chan struct{})
	m.flights[sku] = done
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.bg, m.cfg.refillTO)
		defer cancel()
		if err := m.fly(ctx, sku, 0, g, done); err != nil {
			m.refillFails.Add(1)
		}
	}()
}

// grantShared grants sku at least need units, or adds need to the demand
// of the grant of sku this process already has in flight and waits for it
// (the caller then calls Redis again, and grants again if that was not
// enough).
func (m *Manager) grantShared(ctx context.Context, sku string, need, after int64) error {
	m.mu.Lock()
	if done, busy := m.flights[sku]; busy {
		m.demand[sku] += need
		m.mu.Unlock()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("tiered: reduce %q: waiting for a grant: %w", sku, ctx.Err())
		}
	}
	done := make(chan struct{})
	m.flights[sku] = done
	m.mu.Unlock()
	return m.fly(ctx, sku, need, after, done)
}

// maxFlightGrants bounds the grants of one flight.
const maxFlightGrants = 3

// fly runs the flight of sku that done ends: a grant of need units, then
// (at most maxFlightGrants in all) one more for the demand of the calls
// that came to wait meanwhile, up to 16 chunks, so that a burst of buyers
// on a short allotment costs SQL a few grants, not one per buyer.
func (m *Manager) fly(ctx context.Context, sku string, need, after int64, done chan struct{}) error {
	defer func() {
		m.mu.Lock()
		delete(m.flights, sku)
		delete(m.demand, sku)
		m.mu.Unlock()
		close(done)
	}()
	for i := 0; ; i++ {
		last, err := m.grant(ctx, sku, need, after)
		if err != nil {
			return err
		}
		m.mu.Lock()
		d := m.demand[sku]
		delete(m.demand, sku)
		m.mu.Unlock()
		if d == 0 || i+1 == maxFlightGrants {
			return nil
		}
		need, after = min(d, 16*m.cfg.chunk), last
	}
}

// grant takes max(need, chunk) units (or what is left) of sku's pool in
// SQL as the next grant, then applies to Redis every grant after id after.
// It returns SQL's last grant id.
func (m *Manager) grant(ctx context.Context, sku string, need, after int64) (int64, error) {
	var pool, gen, last int64
	var list []any
	err := m.tx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.QueryRowxContext(ctx, m.q.lock, sku).Scan(&pool, &gen, &last); err != nil {
			return err
		}
		n := min(max(need, m.cfg.chunk), pool)
		if n > 0 {
			last++
			pool -= n
			if _, err := tx.ExecContext(ctx, m.q.grant, n, last, sku, gen); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.q.grantRow, sku, gen, last, n); err != nil {
				return err
			}
		}
		rows, err := tx.QueryxContext(ctx, m.q.grantsAfter, sku, gen, after)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, qty int64
			if err := rows.Scan(&id, &qty); err != nil {
				return err
			}
			list = append(list, id, qty)
		}
		return rows.Err()
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("tiered: grant %q: %w", sku, inventory.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("tiered: grant %q in SQL: %w", sku, err)
	}
	keys := []string{m.stateKey(sku)}
	args := append([]any{gen, last, pool}, list...)
	for range 3 {
		cmd, _, err := applyScript.Run(ctx, m.rdb, 0, 0, keys, args...)
		if err != nil {
			return 0, fmt.Errorf("tiered: apply grants of %q: %w", sku, withCtx(ctx, err))
		}
		switch g, _ := cmd.Int64(); g {
		case -1:
			// No state, or an older generation: warm up. Grants made
			// before the warm-up count as applied; their units are lost
			// to this generation (an undersell, never an oversell).
			if err := m.warm(ctx, sku); err != nil {
				return 0, err
			}
		case -3:
			// after was behind no grant Redis applied (an older
			// generation's id): every grant of the generation, again.
			if args, err = m.grantArgs(ctx, sku, gen); err != nil {
				return 0, err
			}
		default:
			return last, nil // applied, or Redis is at a newer generation
		}
	}
	return last, nil
}

// grantArgs returns apply.lua's arguments for every grant of sku's
// generation gen, as SQL has them now.
func (m *Manager) grantArgs(ctx context.Context, sku string, gen int64) ([]any, error) {
	var pool, gen2, last int64
	if err := m.db.QueryRowxContext(ctx, m.q.read, sku).Scan(&pool, &gen2, &last); err != nil {
		return nil, fmt.Errorf("tiered: grants of %q: %w", sku, err)
	}
	if gen2 != gen {
		return []any{gen, int64(-1), int64(0)}, nil // an Init since: applies nothing
	}
	rows, err := m.db.QueryxContext(ctx, m.q.grantsAfter, sku, gen, 0)
	if err != nil {
		return nil, fmt.Errorf("tiered: grants of %q: %w", sku, err)
	}
	defer rows.Close()
	args := []any{gen, last, pool}
	for rows.Next() {
		var id, qty int64
		if err := rows.Scan(&id, &qty); err != nil {
			return nil, fmt.Errorf("tiered: grants of %q: %w", sku, err)
		}
		args = append(args, id, qty)
	}
	return args, rows.Err()
}

// Warm loads skus (every SKU of the SKU table when none is given) from SQL
// into Redis before a sale, and grants a chunk to each whose allotment is
// at or below the low-water mark, so that its first buyers do not wait for
// a grant. It is fenced by generation: it never overwrites Redis state of
// the same or a newer generation. It returns how many SKUs it loaded.
func (m *Manager) Warm(ctx context.Context, skus ...string) (int, error) {
	for _, sku := range skus {
		if err := driver.ValidateSKU(sku); err != nil {
			return 0, err
		}
	}
	if len(skus) == 0 {
		if err := m.db.SelectContext(ctx, &skus, m.q.skus); err != nil {
			return 0, fmt.Errorf("tiered: warm: list SKUs: %w", err)
		}
	}
	n := 0
	for _, sku := range skus {
		wrote, _, err := m.warmSQL(ctx, sku)
		if err != nil {
			return n, err
		}
		if wrote {
			n++
		}
		v, err := m.rdb.HMGet(ctx, m.stateKey(sku), "a", "g").Result()
		if err != nil {
			return n, fmt.Errorf("tiered: warm %q: %w", sku, withCtx(ctx, err))
		}
		a, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		g, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		if a <= m.cfg.lowWater {
			if _, err := m.grant(ctx, sku, 0, g); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// warm loads sku from SQL into Redis unless Redis holds its generation.
func (m *Manager) warm(ctx context.Context, sku string) error {
	_, _, err := m.warmSQL(ctx, sku)
	return err
}

func (m *Manager) warmSQL(ctx context.Context, sku string) (wrote bool, last int64, err error) {
	var pool, gen int64
	err = m.db.QueryRowxContext(ctx, m.q.read, sku).Scan(&pool, &gen, &last)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, fmt.Errorf("tiered: %q: %w", sku, inventory.ErrNotFound)
	}
	if err != nil {
		return false, 0, fmt.Errorf("tiered: warm %q from SQL: %w", sku, err)
	}
	wrote, err = m.warmWith(ctx, sku, gen, last, pool)
	if err != nil {
		return false, 0, fmt.Errorf("tiered: warm %q: %w", sku, err)
	}
	return wrote, last, nil
}

func (m *Manager) warmWith(ctx context.Context, sku string, gen, last, pool int64) (bool, error) {
	return m.warmWait(ctx, sku, gen, last, pool, 0)
}

// warmWait is warmWith, waiting for replicas replicas (WithReplicas) when
// it wrote.
func (m *Manager) warmWait(ctx context.Context, sku string, gen, last, pool int64, replicas int) (bool, error) {
	cmd, acked, err := warmScript.Run(ctx, m.rdb, replicas, m.cfg.replicaTO, []string{m.stateKey(sku), m.journalKey(sku)}, gen, last, pool, group)
	m.result(ctx, err)
	if err != nil {
		return false, withCtx(ctx, err)
	}
	n, err := cmd.Int64()
	if err == nil && n == 1 && acked < int64(replicas) {
		err = m.checkReplicas(acked)
	}
	return n == 1, err
}

var (
	_ inventory.StockManager = (*Manager)(nil)
	_ inventory.OrderManager = (*Manager)(nil)
)
