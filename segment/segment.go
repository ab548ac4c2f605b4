// Package segment is an [inventory.StockManager] and an
// [inventory.OrderManager] over SQL that splits each SKU's stock into
// segment rows, so that the writers of one hot SKU, in
// many processes, update different rows instead of queueing on one. It
// runs on MariaDB/MySQL, PostgreSQL and SQLite through
// [github.com/jmoiron/sqlx].
//
// # Segments
//
// The stock of a SKU lives in N rows (sku, seg, available) of the library's
// own segments table, named after the stock table of [sqlstore.Schema]
// with [Suffix] ("stock_segments" by default), which
// [Manager.CreateTables] creates; the user's stock table is not read or
// written. N is [WithSegments], 8 by default. Init spreads the stock
// evenly over the N rows (and deletes any further rows an Init with more
// segments left); Get returns their sum.
//
// The unkeyed Reduces of one SKU that a Manager has in flight combine
// (as optimistic's do): while one batch of the SKU is being written, the
// calls that arrive queue up, and the next batch takes them all, up to
// 128. A batch picks a segment by a rotation of its Manager's (Managers
// start theirs at random), skipping the segments it last saw empty, and
// takes its units from it in one autocommit conditional UPDATE
// (available = available - n WHERE available >= n, and the SKU has no
// hold past its TTL). If that segment cannot fit the batch, the batch
// takes the SKU path: a snapshot read of the SKU's sum (and of its units
// held past their TTL) refuses every call it cannot fit, with no lock;
// otherwise one transaction locks every segment row of the SKU in segment
// order, releases its holds past their TTL, serves the calls in order
// while the sum fits them, and writes the SKU's new stock back spread
// evenly over its segments (rebalancing). A keyed
// Reduce runs alone: one transaction takes its units from one segment and
// writes its key; if the segment cannot fit it, it tries one other
// segment, then the SKU path as above. So a Reduce is refused only when
// the SKU as a whole cannot fit it at that moment, never because its
// segment ran dry; a Reduce larger than any one segment takes from
// several, all or nothing; and a drained segment is refilled by the next
// Reduce that misses it. docs/segments.md gives the measured costs.
//
// A Return takes the SKU path: it locks the segment rows, releases the
// SKU's holds past their TTL, checks the SKU's sum against [inventory.MaxStock] and writes the new stock back
// spread evenly. Returns are rare next to Reduces; they cost a lock of
// the SKU's rows.
//
// # Idempotency
//
// Keys are per SKU, not per segment: [inventory.WithKey] writes the key in
// the idempotency ledger of [sqlstore.Schema] (the table the other SQL
// strategies use) in the transaction that moves the stock, whichever
// segment it takes from, so a keyed retry that lands on another segment
// is still told [inventory.ErrDuplicate]. Keys expire after [WithKeyTTL].
//
// # What the remaining value means
//
// Get returns the sum of the SKU's segments as of one statement's snapshot:
// a value the stock had at a moment during the call. A Reduce or Return
// that took the SKU path, and every refusal, return the stock exactly as
// it was after (or, refused, at) the call's moment under the SKU's lock
// or in one snapshot. A Reduce that took its units from one segment
// returns a sum read with or after its write: on PostgreSQL the other
// segments as of the write's own snapshot, elsewhere a snapshot read
// right after the write (in a keyed call's transaction, before its
// commit), less, in a batch, the units of the calls combined after it. It
// is at least 0 and, with no Return or Init overlapping, below the stock
// before the call; with no call overlapping it is exact. But it is not
// linearizable: two overlapping Reduces may return the same remaining
// value, and a remaining of 0 does not prove the SKU sold out (nor one
// above 0 that it has stock left); only an ErrInsufficientStock, or Get,
// says what is there. (Should the read of the sum fail after the write
// took effect, the call returns its segment's own stock, a lower bound.)
// The conformance suite runs with
// inventorytest.Config.RemainingNotLinearizable set for this reason.
//
// # Orders
//
// The Manager is also an [inventory.OrderManager]: the calls of
// rowlock's order engine (internal/sqlengine), whose rows are here the
// SKUs' segment rows. Every lines call, Reserve, Confirm, Cancel and Sweep
// is one transaction that locks every segment row of its SKUs, SKU by SKU
// in SKU order, releases the SKUs' lines held past their TTL, checks
// every line against its SKU's sum and writes each SKU's new stock back
// spread evenly over its segments, with the holds' rows (the holds table
// of [sqlstore.Schema]). So a Reserve takes a line's units from several
// segments at once, all or nothing, refused only when the SKU's sum
// cannot fit it; Cancel and an expiry give the units back spread over the
// segments, and Confirm sells them (the holds' rows alone change).
// A Reduce that takes from one segment does so only if the SKU has no
// line held past its TTL; otherwise it takes the SKU path, which releases
// them first. Held is the units of the SKU's held lines, as of one
// statement. docs/segments.md says what a caller may rely on.
//
// The idempotency key of ReduceLines and ReturnLines is kept in the
// ledger under the empty SKU, apart from the keys of single-SKU calls.
// The SKUs of a Manager's holds must all be segmented: Sweep skips a hold
// with a SKU that has no segment rows (it is another strategy's to
// release), and the other calls refuse one with [inventory.ErrNotFound].
//
// # Redis
//
// [NewRedis] returns a [Redis], the same idea over Redis: segment keys
// spread over a Cluster's slots, with orders and holds (see its doc).
package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/front"
	"github.com/stockkit/inventory/internal/merge"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/sqlstore"
)

// MaxSegments is the most segments a SKU may have.
const MaxSegments = 64

// DefaultSegments is the number of segments unless [WithSegments] says.
const DefaultSegments = 8

const pkg = "segment"

// Manager implements [inventory.StockManager] and [inventory.OrderManager]
// over segment rows: its methods are those of the two interfaces,
// documented there and in the package documentation. It is safe for
// concurrent use. Create it with [New].
type Manager struct {
	sqlFace // validates, checks ctx, wraps errors; calls *sqlBackend (segment.go, orders.go)
	t       *sqlengine.Tables
	o       *sqlengine.Orders // the order engine over the segment rows (orders.go)
	q       statements
	n       int           // segments per SKU
	seg     string        // the segments table's name, unquoted
	next    atomic.Uint64 // the rotation over segments
	hints   hints         // the segments each SKU was last seen to have empty
	st      *stmts        // the hot statements, prepared on MySQL

	comb *merge.Keyed[string, struct{}, int64, got] // the unkeyed Reduces of each SKU in flight (combine.go)
}

// sqlFace is the Manager's [front.Front], embedded under a name of its own
// so that the field stays unexported.
type sqlFace = front.Front

var (
	_ inventory.StockManager = (*Manager)(nil)
	_ inventory.OrderManager = (*Manager)(nil)
)

type config struct {
	schema sqlstore.Schema
	ttl    time.Duration
	n      int
	sweep  int
	redis  redisConfig // NewRedis's own options (redis.go)
}

// Option configures [New]. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithSegments sets how many segments Init spreads a SKU's stock over, in
// 1..[MaxSegments]. The default is [DefaultSegments]. Managers that share
// SKUs should use the same number: each Init sets a SKU's segments to its
// own Manager's number, and a Manager with fewer segments than the SKU has
// reaches the further ones only through the SKU path.
func WithSegments(n int) Option { return func(c *config) { c.n = n } }

// WithSchema names the tables: the segments table is named after
// Schema.Table (see [Suffix]), idempotency keys go to Schema.Ledger and
// holds to Schema.Holds; the other names are unused. The default is the
// zero Schema: sqlstore's default names.
func WithSchema(s sqlstore.Schema) Option { return func(c *config) { c.schema = s } }

// WithKeyTTL sets how long an idempotency key, and the id of a hold that
// ended, is remembered; at least a millisecond. The default is
// [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithSweepLimit sets how many holds one Sweep releases at most, each in
// a transaction of its own; at least 1. The default is 1000.
func WithSweepLimit(n int) Option { return func(c *config) { c.sweep = n } }

// New returns a Manager over db. The tables must exist: see
// [Manager.CreateTables]. New validates the options and names and chooses
// the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := config{ttl: inventory.DefaultKeyTTL, n: DefaultSegments, sweep: 1000}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.n < 1 || c.n > MaxSegments {
		return nil, fmt.Errorf("%s: %w: %d segments, want 1..%d", pkg, inventory.ErrInvalidArgument, c.n, MaxSegments)
	}
	if c.sweep < 1 {
		return nil, fmt.Errorf("%s: %w: sweep limit %d < 1", pkg, inventory.ErrInvalidArgument, c.sweep)
	}
	if c.redis.replicasSet {
		return nil, fmt.Errorf("%s: %w: WithReplicas waits for Redis replicas; New is SQL's", pkg, inventory.ErrInvalidArgument)
	}
	t, err := sqlengine.New(db, sqlengine.Config{Pkg: pkg, Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl})
	if err != nil {
		return nil, err
	}
	s := sqldialect.Schema(c.schema).WithDefaults()
	seg := s.Table[:min(len(s.Table), 63-len(Suffix))] + Suffix
	m := &Manager{t: t, q: build(t.Engine, seg, s.Ledger, t.Render("{{.Holds}}"), t.Render("{{.Now}}")), n: c.n, seg: seg}
	m.o = &sqlengine.Orders{T: t, Stock: (*segRows)(m), Attempts: attempts, Base: time.Millisecond, Cap: 20 * time.Millisecond,
		SweepLimit: c.sweep}
	m.sqlFace = front.New(pkg, (*sqlBackend)(m), nil)
	m.hints.seed = maphash.MakeSeed()
	m.next.Store(rand.Uint64()) // Managers of one SKU start their rotations apart
	m.comb = merge.NewKeyed(maxBatch, m.sendBatch)
	m.st = new(stmts)
	runtime.AddCleanup(m, func(st *stmts) { st.close() }, m.st)
	return m, nil
}

// Table returns the name of the segments table.
func (m *Manager) Table() string { return m.seg }

// CreateTables creates the segments table and the library's other tables
// (those of [sqlstore.Store.CreateTables], the idempotency ledger and the
// holds table among them), if they are absent.
func (m *Manager) CreateTables(ctx context.Context) error {
	if err := m.t.CreateTables(ctx); err != nil {
		return err
	}
	for _, stmt := range m.q.create {
		if _, err := m.t.DB.ExecContext(ctx, stmt); err != nil {
			return m.t.Err(ctx, "create tables", err)
		}
	}
	return nil
}

// sqlBackend is the Manager seen by its face: the calls with valid
// arguments and a live ctx.
type sqlBackend Manager

// Init implements [front.Backend]: it sets the SKU's segments to qty
// spread evenly over the Manager's number of segments. The SKU's holds
// stay as they are.
func (b *sqlBackend) Init(ctx context.Context, sku string, qty int64) error {
	m := (*Manager)(b)
	segs := make([]int, m.n)
	for i := range segs {
		segs[i] = i
	}
	return m.retry(ctx, func() error {
		return m.t.Tx(ctx, func(tx *sqlx.Tx) error {
			if err := m.write(ctx, tx, sku, segs, qty); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, m.q.clear, sku, m.n); err != nil {
				return m.t.Err(ctx, "init", err)
			}
			return nil
		})
	})
}

// Get implements [front.Backend]: the sum of the SKU's segments.
func (b *sqlBackend) Get(ctx context.Context, sku string) (int64, error) {
	var sum, n int64
	if err := b.t.DB.QueryRowxContext(ctx, b.q.total, sku).Scan(&sum, &n); err != nil {
		return 0, b.t.Err(ctx, "get", err)
	}
	if n == 0 {
		return 0, b.t.NotFound(sku)
	}
	return sum, nil
}

// Move implements [front.Backend]: a Reduce or a Return.
func (b *sqlBackend) Move(ctx context.Context, sku string, qty int64, dir driver.Direction, key string) (int64, error) {
	m := (*Manager)(b)
	var rem int64
	err := m.retry(ctx, func() (err error) {
		if dir == driver.DirReturn {
			rem, err = m.whole(ctx, sku, qty, dir, key)
		} else {
			rem, err = m.reduce(ctx, sku, qty, key)
		}
		return err
	})
	return rem, err
}

// attempts is how many times a call runs when the database broke its
// transaction off as a deadlock or serialization failure.
const attempts = 3

// retry runs fn again while it fails with ErrContention, up to attempts
// times in all.
func (m *Manager) retry(ctx context.Context, fn func() error) error {
	var err error
	for range attempts {
		if err = fn(); !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
			return err
		}
	}
	return err
}
