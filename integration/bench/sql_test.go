package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	_ "github.com/stockkit/inventory/integration/sqlite" // registers "sqlite"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// sqlConns is the pool size of the server engines in these comparisons,
// shared by both sides: PostgreSQL allows 100 connections, and other test
// runs may share the server.
const sqlConns = sqltest.Conns

// fillPool opens n connections of db before any case runs, and keeps them
// idle in the pool, so that no turn waits for a connection or fails to get
// one while other clients crowd the server: it retries for up to a minute
// while the server refuses ("too many clients").
func fillPool(b *testing.B, db *sqlx.DB, n int) {
	b.Helper()
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for len(conns) < n {
		c, err := db.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err == nil {
			conns = append(conns, c)
			continue
		}
		if c != nil {
			c.Close()
		}
		if ctx.Err() != nil {
			b.Fatalf("%d of %d connections open after a minute: %v", len(conns), n, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// engineNames are sqltest.Engines' names as the table shows them.
var engineNames = map[string]string{"mariadb": "MariaDB", "postgres": "PostgreSQL", "sqlite": "SQLite"}

// sqlBench is one engine under comparison: a pool, fresh tables, and the
// SKUs of both layouts initialised to MaxStock.
type sqlBench struct {
	name   string
	db     *sqlx.DB
	schema sqlstore.Schema
	store  *sqlstore.Store
	skus   map[layout][]string
	// update is the baseline statement, prepared once on db.
	update *sql.Stmt
}

func openSQL(b *testing.B, e sqltest.Engine) *sqlBench {
	db := e.Open(b)
	if db.DriverName() != "sqlite" {
		fillPool(b, db, sqlConns)
	}
	schema := sqltest.Schema(b, db)
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	s := &sqlBench{name: engineNames[e.Name], db: db, schema: schema, store: store, skus: map[layout][]string{}}
	for _, l := range []layout{hot, spread} {
		s.skus[l] = l.names("sql")
		for _, sku := range s.skus[l] {
			if err := store.Init(context.Background(), sku, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
		}
	}
	q := `"`
	if db.DriverName() == "mysql" {
		q = "`"
	}
	// Prepared once, as the library prepares its own statements (the mysql
	// driver otherwise prepares and closes a statement with arguments on
	// every call; pgx caches them itself): the strongest bare UPDATE.
	s.update, err = db.Prepare(db.Rebind("UPDATE " + q + schema.Table + q + " SET stock = stock - 1 WHERE sku = ? AND stock >= 1"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.update.Close() })
	return s
}

// bareUpdate is the SQL baseline: the conditional UPDATE, prepared once,
// one statement per call; no idempotency key, no retry.
func (s *sqlBench) bareUpdate(l layout) benchcmp.Side {
	skus := s.skus[l]
	return benchcmp.Side{Name: "bare conditional UPDATE", Op: func(ctx context.Context, _ int, rng *rand.Rand) error {
		res, err := s.update.ExecContext(ctx, pick(rng, skus))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("bare UPDATE changed %d rows (%v): out of stock?", n, err)
		}
		return nil
	}}
}

// gaveUp counts the calls that ended in ErrContention, which a caller
// retries; the Op retries them too. extra, if set, adds to its note.
type gaveUp struct {
	calls, gave atomic.Int64
	extra       func() string
}

func (g *gaveUp) take(ctx context.Context, reduce func(ctx context.Context) error) error {
	g.calls.Add(1)
	for {
		err := reduce(ctx)
		if !errors.Is(err, inventory.ErrContention) {
			return err
		}
		g.gave.Add(1)
	}
}

// note says how many calls gave up, if any did.
func (g *gaveUp) note() string {
	var notes []string
	if n := g.gave.Load(); n > 0 {
		notes = append(notes, fmt.Sprintf("%.2f%% of calls gave up with ErrContention and were retried", 100*float64(n)/float64(max(g.calls.Load(), 1))))
	}
	if g.extra != nil {
		notes = append(notes, g.extra())
	}
	return strings.Join(notes, "; ")
}

// managerSide is a StockManager taking one unit per call, ErrContention
// retried and counted.
func managerSide(name string, ms []inventory.StockManager, skus []string, g *gaveUp) benchcmp.Side {
	return benchcmp.Side{Name: name, Op: func(ctx context.Context, w int, rng *rand.Rand) error {
		sku := pick(rng, skus)
		return g.take(ctx, func(ctx context.Context) error {
			_, err := ms[w%len(ms)].Reduce(ctx, sku, 1)
			return err
		})
	}}
}

// keyedSide is managerSide with an idempotency key of its own per call
// (unique across both sides and rounds).
func keyedSide(name string, m inventory.StockManager, skus []string, g *gaveUp, next *atomic.Int64) benchcmp.Side {
	return benchcmp.Side{Name: name, Op: func(ctx context.Context, _ int, rng *rand.Rand) error {
		sku, key := pick(rng, skus), inventory.WithKey(fmt.Sprint("k", next.Add(1)))
		return g.take(ctx, func(ctx context.Context) error {
			_, err := m.Reduce(ctx, sku, 1, key)
			return err
		})
	}}
}

// naiveCAS is the textbook version compare-and-set: read, write if the
// version held, otherwise back off (decorrelated jitter, 1ms to 100ms, as
// optimistic does) and read again; every goroutine for itself.
type naiveCAS struct {
	store               *sqlstore.Store
	attempts, conflicts atomic.Int64
}

func (n *naiveCAS) take(ctx context.Context, sku string) error {
	const base, ceiling = time.Millisecond, 100 * time.Millisecond
	pause := base
	for {
		stock, v, err := n.store.Read(ctx, sku)
		if err != nil {
			return err
		}
		if stock < 1 {
			return inventory.ErrInsufficientStock
		}
		n.attempts.Add(1)
		ok, err := n.store.CompareAndSet(ctx, sku, v, stock-1, driver.DirReduce, "")
		if ok || (err != nil && !errors.Is(err, inventory.ErrContention)) {
			return err
		}
		n.conflicts.Add(1)
		pause = min(ceiling, base+rand.N(max(3*pause, base+1)-base))
		time.Sleep(pause)
	}
}

// naiveRowLock is the textbook row lock: per call one transaction that reads
// the row with SELECT ... FOR UPDATE and writes the new stock back with a
// plain UPDATE; every goroutine for itself.
type naiveRowLock struct {
	db           *sqlx.DB
	lock, update string
}

func newNaiveRowLock(s *sqlBench) *naiveRowLock {
	q := `"`
	if s.db.DriverName() == "mysql" {
		q = "`"
	}
	t := q + s.schema.Table + q
	return &naiveRowLock{db: s.db,
		lock:   s.db.Rebind("SELECT stock FROM " + t + " WHERE sku = ? FOR UPDATE"),
		update: s.db.Rebind("UPDATE " + t + " SET stock = ? WHERE sku = ?")}
}

func (n *naiveRowLock) take(ctx context.Context, sku string) error {
	tx, err := n.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	var stock int64
	if err := tx.QueryRowxContext(ctx, n.lock, sku).Scan(&stock); err != nil {
		return err
	}
	if stock < 1 {
		return inventory.ErrInsufficientStock
	}
	if _, err := tx.ExecContext(ctx, n.update, stock-1, sku); err != nil {
		return err
	}
	return tx.Commit()
}

// BenchmarkSQL compares the SQL strategies with the bare conditional UPDATE
// on each engine (MariaDB, PostgreSQL, SQLite):
//   - optimistic as shipped, on one hot row (16, 64 and 256 goroutines) and on
//     64 spread rows;
//   - optimistic.WithSingleStatement on spread rows, where there is nothing
//     to combine;
//   - rowlock, hot and spread;
//   - the naive version CAS, for reference, on one hot row (MariaDB);
//   - optimistic over four Managers (as four processes: calls combine only
//     within one) against one Manager, on one hot row: the cross-process
//     cost, with optimistic itself as the baseline;
//   - rowlock over four Managers against the naive row lock (one SELECT ...
//     FOR UPDATE and UPDATE transaction per call), on one hot row.
func BenchmarkSQL(b *testing.B) {
	for _, e := range sqltest.Benched {
		b.Run(e.Name, func(b *testing.B) {
			s := openSQL(b, e)
			newOpt := func(opts ...optimistic.Option) inventory.StockManager {
				m, err := optimistic.New(s.db, append([]optimistic.Option{optimistic.WithSchema(s.schema)}, opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				return m
			}
			rl, err := rowlock.New(s.db, rowlock.WithSchema(s.schema))
			if err != nil {
				b.Fatal(err)
			}
			opt, single := newOpt(), newOpt(optimistic.WithSingleStatement())
			ledgered := newOpt(optimistic.WithLedger())
			var keys atomic.Int64
			if err := ledgered.(*optimistic.Manager).CreateTables(context.Background()); err != nil { // the ledger's table
				b.Fatal(err)
			}
			type row struct {
				variant string
				l       layout
				gs      []int
				side    func(l layout, g *gaveUp) benchcmp.Side
				base    func(l layout, g *gaveUp) benchcmp.Side
				engines []string // nil: all
			}
			one := func(m inventory.StockManager, name string) func(layout, *gaveUp) benchcmp.Side {
				return func(l layout, g *gaveUp) benchcmp.Side {
					return managerSide(name, []inventory.StockManager{m}, s.skus[l], g)
				}
			}
			bare := func(l layout, _ *gaveUp) benchcmp.Side { return s.bareUpdate(l) }
			rows := []row{
				{"optimistic", hot, goroutines, one(opt, "optimistic"), bare, nil},
				{"optimistic", spread, []int{64}, one(opt, "optimistic"), bare, nil},
				{"single statement", spread, []int{64}, one(single, "optimistic, WithSingleStatement"), bare, nil},
				// The movement ledger's price: ledger on against off, alternating.
				{"optimistic ledger", hot, []int{64}, one(ledgered, "optimistic, WithLedger"), func(l layout, g *gaveUp) benchcmp.Side {
					return managerSide("optimistic, no ledger", []inventory.StockManager{opt}, s.skus[l], g)
				}, nil},
				{"optimistic ledger, keyed", hot, []int{64}, func(l layout, g *gaveUp) benchcmp.Side {
					return keyedSide("optimistic, WithLedger, keyed", ledgered, s.skus[l], g, &keys)
				}, func(l layout, g *gaveUp) benchcmp.Side {
					return keyedSide("optimistic, no ledger, keyed", opt, s.skus[l], g, &keys)
				}, nil},
				{"rowlock", hot, []int{64}, one(rl, "rowlock"), bare, nil},
				{"rowlock", spread, []int{64}, one(rl, "rowlock"), bare, nil},
				{"naive CAS", hot, []int{64}, func(l layout, g *gaveUp) benchcmp.Side {
					n := &naiveCAS{store: s.store}
					g.extra = func() string {
						return fmt.Sprintf("%.0f%% of its CAS writes lost", 100*float64(n.conflicts.Load())/float64(max(n.attempts.Load(), 1)))
					}
					skus := s.skus[l]
					return benchcmp.Side{Name: "naive version CAS (reference)", Op: func(ctx context.Context, _ int, rng *rand.Rand) error {
						return n.take(ctx, pick(rng, skus))
					}}
				}, bare, []string{"mariadb"}},
				{"optimistic 4 processes", hot, []int{64}, func(l layout, g *gaveUp) benchcmp.Side {
					return managerSide("optimistic, 4 Managers", []inventory.StockManager{newOpt(), newOpt(), newOpt(), newOpt()}, s.skus[l], g)
				}, func(l layout, g *gaveUp) benchcmp.Side {
					return managerSide("optimistic, 1 Manager", []inventory.StockManager{newOpt()}, s.skus[l], g)
				}, []string{"mariadb", "postgres"}},
				{"rowlock 4 processes", hot, []int{64}, func(l layout, g *gaveUp) benchcmp.Side {
					ms := make([]inventory.StockManager, 4)
					for i := range ms {
						if ms[i], err = rowlock.New(s.db, rowlock.WithSchema(s.schema)); err != nil {
							b.Fatal(err)
						}
					}
					return managerSide("rowlock, 4 Managers", ms, s.skus[l], g)
				}, func(l layout, _ *gaveUp) benchcmp.Side {
					n, skus := newNaiveRowLock(s), s.skus[l]
					return benchcmp.Side{Name: "naive SELECT ... FOR UPDATE + UPDATE transaction", Op: func(ctx context.Context, _ int, rng *rand.Rand) error {
						return n.take(ctx, pick(rng, skus))
					}}
				}, []string{"mariadb", "postgres"}},
			}
			for _, r := range rows {
				if r.engines != nil && !slices.Contains(r.engines, e.Name) {
					continue
				}
				for _, g := range r.gs {
					var gu gaveUp
					strategy, baseline := r.side(r.l, &gu), r.base(r.l, &gaveUp{})
					strategy.Name += ", " + s.name
					baseline.Name += ", " + s.name
					benchcmp.Run(b, benchcmp.Case{
						Group:      "SQL",
						Name:       s.name + ", " + r.variant + ", " + r.l.name,
						Layout:     r.l.String(),
						Goroutines: g,
						Strategy:   strategy,
						Baseline:   baseline,
						Note:       gu.note,
					})
				}
			}
		})
	}
}
