// Package segment is an [inventory.StockManager] over SQL that splits each
// SKU's stock into segment rows, so that the writers of one hot SKU, in
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
// (available = available - n WHERE available >= n). If that segment
// cannot fit the batch, the batch takes the SKU path: a snapshot read of
// the SKU's sum refuses every call it cannot fit, with no lock; otherwise
// one transaction locks every segment row of the SKU in segment order,
// serves the calls in order while the sum fits them, and writes the SKU's
// new stock back spread evenly over its segments (rebalancing). A keyed
// Reduce runs alone: one transaction takes its units from one segment and
// writes its key; if the segment cannot fit it, it tries one other
// segment, then the SKU path as above. So a Reduce is refused only when
// the SKU as a whole cannot fit it at that moment, never because its
// segment ran dry; a Reduce larger than any one segment takes from
// several, all or nothing; and a drained segment is refilled by the next
// Reduce that misses it. docs/segments.md gives the measured costs.
//
// A Return takes the SKU path: it locks the segment rows, checks the
// SKU's sum against [inventory.MaxStock] and writes the new stock back
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
// # Not in this package (yet)
//
// The Manager is not an [inventory.OrderManager]: the lines calls and
// holds on segmented SKUs, and a movement ledger, are later work.
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

// Manager implements [inventory.StockManager] over segment rows. It is safe
// for concurrent use. Create it with [New].
type Manager struct {
	t     *sqlengine.Tables
	q     statements
	n     int           // segments per SKU
	seg   string        // the segments table's name, unquoted
	next  atomic.Uint64 // the rotation over segments
	hints hints         // the segments each SKU was last seen to have empty
	st    *stmts        // the hot statements, prepared on MySQL

	comb *merge.Keyed[string, struct{}, int64, got] // the unkeyed Reduces of each SKU in flight (combine.go)
}

var _ inventory.StockManager = (*Manager)(nil)

type config struct {
	schema sqlstore.Schema
	ttl    time.Duration
	n      int
	prefix string // NewRedis's key prefix (redis.go)
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
// Schema.Table (see [Suffix]), and idempotency keys go to Schema.Ledger;
// the other names are unused. The default is the zero Schema: sqlstore's
// default names.
func WithSchema(s sqlstore.Schema) Option { return func(c *config) { c.schema = s } }

// WithKeyTTL sets how long an idempotency key is remembered; at least a
// millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// New returns a Manager over db. The tables must exist: see
// [Manager.CreateTables]. New validates the options and names and chooses
// the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Manager, error) {
	c := config{ttl: inventory.DefaultKeyTTL, n: DefaultSegments}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.n < 1 || c.n > MaxSegments {
		return nil, fmt.Errorf("%s: %w: %d segments, want 1..%d", pkg, inventory.ErrInvalidArgument, c.n, MaxSegments)
	}
	t, err := sqlengine.New(db, sqlengine.Config{Pkg: pkg, Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl})
	if err != nil {
		return nil, err
	}
	s := sqldialect.Schema(c.schema).WithDefaults()
	seg := s.Table[:min(len(s.Table), 63-len(Suffix))] + Suffix
	m := &Manager{t: t, q: build(t.Engine, seg, s.Ledger), n: c.n, seg: seg}
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
// (those of [sqlstore.Store.CreateTables], the idempotency ledger among
// them), if they are absent.
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

// Init implements [inventory.StockManager]: it sets the SKU's segments to
// qty spread evenly over the Manager's number of segments.
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
		return m.wrap("init", "", err)
	}
	if err := ctx.Err(); err != nil {
		return m.wrap("init", sku, err)
	}
	segs := make([]int, m.n)
	for i := range segs {
		segs[i] = i
	}
	err := m.retry(ctx, func() error {
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
	return m.wrap("init", sku, err)
}

// Get implements [inventory.StockManager]: the sum of the SKU's segments.
func (m *Manager) Get(ctx context.Context, sku string) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, m.wrap("get", "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, m.wrap("get", sku, err)
	}
	var sum, n int64
	if err := m.t.DB.QueryRowxContext(ctx, m.q.total, sku).Scan(&sum, &n); err != nil {
		return 0, m.wrap("get", sku, m.t.Err(ctx, "get", err))
	}
	if n == 0 {
		return 0, m.wrap("get", sku, m.t.NotFound(sku))
	}
	return sum, nil
}

// Reduce implements [inventory.StockManager].
func (m *Manager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, driver.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (m *Manager) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, driver.DirReturn, opts)
}

func (m *Manager) move(ctx context.Context, sku string, qty int64, dir driver.Direction, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, m.wrap(string(dir), "", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, m.wrap(string(dir), sku, err)
	}
	var rem int64
	err = m.retry(ctx, func() (err error) {
		if dir == driver.DirReturn {
			rem, err = m.whole(ctx, sku, qty, dir, o.Key)
		} else {
			rem, err = m.reduce(ctx, sku, qty, o.Key)
		}
		return err
	})
	return rem, m.wrap(string(dir), sku, err)
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

// wrap wraps err, if any, as the error of op on subject, unless it names
// this package already.
func (m *Manager) wrap(op, subject string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*front.Error](err); ok && e.Strategy == pkg {
		return err
	}
	return &front.Error{Strategy: pkg, Op: op, Subject: subject, Err: err}
}
