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
// journal), PREFIX:run (the run_id stamp of the restart fence) and
// rediskeys' idempotency records under PREFIX. SQL tables:
// TABLEPREFIXstock, TABLEPREFIXgrants, TABLEPREFIXsynced and TABLEPREFIXkeys (the
// idempotency keys SQL knows, see [WithKeyedFallback]), and with
// [WithLedger] TABLEPREFIXmoves (the movement ledger), on MariaDB/MySQL
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
// unless [WithKeyedFallback] (served from SQL's pool; a key Redis applied
// and had not synced may then be applied twice, each such pair found by
// the syncer, reported and optionally given back), and so are the order
// calls (see Orders).
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
//     Manager that started after the restart sees it too: each Manager
//     keeps the run_id its state was last known good on in the stamp
//     PREFIX:run, read at its first command, and a stamp of another run_id
//     is fenced the same way (TestFenceManagerStartedAfterRestart). Not
//     covered: a client that must AUTH before INFO, Cluster clients' stamp
//     (their nodes' run_ids are watched), data written before the stamp
//     existed. Two processes, one SIGKILLed with Redis and Redis restored
//     from an older AOF: 0 oversold, each forgotten sale recorded lost
//     (TestFenceTwoProcesses). The fence costs an undersell even when
//     Redis forgot nothing (appendfsync always: 30-80 units per SKU
//     measured, chunk 50); [WithTrustRestarts] reconciles instead of
//     dropping, for a Redis that never comes back older (appendfsync
//     always, or WithReplicas with every replica). docs/tiered.md has
//     every figure.
//
// # Not yet
//
// [Manager.Reconcile] compares grants, synced sales and Redis's allotment
// per SKU, reports the drift and repairs without ever creating a unit. The
// allotment of a Redis that lost its state is not reused (a bounded
// undersell, never an oversell): Reconcile records it as lost. Run it
// after a Redis restart the breaker did not see.
//
// # Movement ledger
//
// [WithLedger] records every move that took effect: the journal entry a
// script appends also carries its moves' records, the syncer writes them as
// rows of TABLEPREFIXmoves in the transaction that applies the entry, and
// the fallback and Init write theirs in their own, and the stock a
// recovery or Reconcile records lost, the holds an Init drops and the
// units WithKeyedFallback gives back are recorded where they are (see
// WithLedger); the Manager is a
// [github.com/stockkit/inventory/ledger.Reader] (see WithLedger and
// docs/ledger.md).
//
// # Merging
//
// Concurrent calls are merged ([WithMaxBatch]): on one server (a plain
// client) the calls of every SKU, on a Cluster those of one slot (as
// luascript merges them), on a Ring those of one SKU. A lone call goes to
// Redis at once, and the calls that arrive while a call is in flight go together
// when it returns, as one script call that applies each in order, journals
// the moves of each SKU as one entry and answers each call on its own.
// [WithReplicas] makes every move, alone or merged, wait for replicas
// (WAIT).
//
// # The parts
//
// The code is built from parts that each own their state, and a call goes
// one way through them. The shared front (internal/front) checks every
// argument and the ctx; the Manager's backend (stock.go, orders.go) sends
// each call to the hot path (merge.go: move.lua alone, batch.lua merged),
// or to the fallback (fallback.go: SQL's pool) while the circuit is open;
// a call that finds the allotment short asks the grants (grants.go: SQL's
// grants and the warm-ups into Redis). The circuit breaker (breaker.go) is
// a state machine told the outcome of every Redis call; the restart watch
// (restart.go) trips it. The syncer (sync.go, prune.go) applies the
// journal to SQL; Reconcile (reconcile.go) and the recovery (fallback.go)
// repair Redis from SQL. options.go holds the options, sql.go the
// statements, call.go the helpers every part uses.
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
// record, so a refused Reserve uses up nothing. A retry of a Reserve that
// finds the record still reserving (the first attempt was cut by a fault,
// or still runs) takes it over: the record gets a new nonce, which names
// its parts, and deadline, so the earlier attempt's steps fail, and the
// earlier attempt's parts are given back before the retry holds the lines;
// a Confirm of a record left reserving past its deadline finds the hold
// run out (ErrHoldReleased) and gives back what it held. Confirm pins every part (a
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
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/merge"
)

// group is the consumer group of the syncers.
const group = "tiered"

// Manager is an [inventory.StockManager] with the stock of record in SQL and
// the hot path in Redis. It is safe for concurrent use, also by several
// processes over the same Redis and database. Create it with [New]; Close
// it to stop its background refills.
type Manager struct {
	front.Front // Init, Get, Reduce, Return and the order calls: the backend's (stock.go, orders.go)

	// What every part reads, set by New.
	rdb      redis.UniversalClient
	db       *sqlx.DB
	q        statements         // sql.go
	sc       scripts            // the scripts that move stock, with or without a ledger (ledger.go)
	cfg      config             // options.go
	consumer string             // this Manager's name in the syncers' consumer group
	bg       context.Context    // the background work's, ended by Close
	stop     context.CancelFunc // ends bg
	wg       sync.WaitGroup     // the background work: refills, recoveries

	// Each part's own state.
	queue      *merge.Queue[req, reply]                     // the hot path (merge.go); nil when calls are not merged (WithMaxBatch(1))
	grantState                                              // the grants in flight (grants.go)
	br         breaker                                      // the circuit breaker (breaker.go)
	fb         *merge.Keyed[string, struct{}, fbReq, fbAns] // the fallback's SQL calls of each SKU (fallback.go)
	fallbacks  atomic.Int64                                 // the calls the fallback served (fallback.go)
	ledger     ledgerState                                  // the syncer's pruning of its ledger (prune.go)
	watch      *restartWatch                                // the restart watch (restart.go)

	// beforeAck, if set (tests), runs after a sync transaction commits
	// and before its entries are acknowledged; an error skips the
	// acknowledgement, as a syncer dying there would.
	beforeAck func() error
	// applied, if set (tests), is told the units sold and returned of the
	// entries each committed sync transaction let into the ledger.
	applied func(sold, returned int64)
}

// New returns a Manager over rdb (any go-redis client, Cluster included) and
// db (MariaDB/MySQL, PostgreSQL or SQLite). Set ContextTimeoutEnabled on the
// go-redis client, so that a call's deadline bounds its wait for a hung
// Redis. Script calls are never resent by go-redis (internal/rediskeys
// Script: NoRetry), whatever its MaxRetries: a call whose connection
// breaks fails, its outcome unknown, and a keyed retry is safe. It checks the options and does no I/O;
// call [Manager.CreateTables] once to create the tables.
func New(rdb redis.UniversalClient, db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := defaults()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if rdb == nil || db == nil {
		return nil, fmt.Errorf("tiered: %w: nil Redis client or database", inventory.ErrInvalidArgument)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	q, err := engineSQL(db.DriverName(), c.tablePrefix)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 8)
	rand.Read(id)
	bg, stop := context.WithCancel(context.Background())
	m := &Manager{rdb: rdb, db: db, q: q, cfg: c, consumer: hex.EncodeToString(id), bg: bg, stop: stop,
		grantState: grantState{flights: map[string]chan struct{}{}, demand: map[string]int64{}}}
	m.sc = plainScripts
	if c.ledgerOn {
		m.sc = ledgerScripts
	}
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
	create := m.q.create
	if m.cfg.ledgerOn {
		create = append(create[:len(create):len(create)], m.q.lcreate...)
	}
	for _, s := range create {
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

// backend is the Manager's front.Backend: its stock calls and its
// order calls (orders.go).
type backend struct {
	stock
	orders
}

var (
	_ inventory.StockManager = (*Manager)(nil)
	_ inventory.OrderManager = (*Manager)(nil)
)
