package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/tiered"
)

// ledgerRows is how many entries BenchmarkLedgerRowBytes writes: enough
// that the pages of a table dwarf its first, partly empty one.
const ledgerRows = 20000

// BenchmarkLedgerRowBytes measures what one entry of the movement ledger
// takes on disk per engine, indexes included: it writes ledgerRows keyed
// Reduces with a reference (a 24-byte SKU, a 20-byte key, a 16-byte
// reference) through optimistic.WithLedger, then reads the table's size
// as the engine counts it (PostgreSQL pg_total_relation_size; MariaDB
// data_length + index_length after ANALYZE TABLE, InnoDB's estimate in
// 16 KiB pages; SQLite dbstat) and reports bytes per entry; then the same
// with unkeyed Reduces with no reference, which merged batches write as
// runs, a row each. Run it with -benchtime 1x.
func BenchmarkLedgerRowBytes(b *testing.B) {
	perEngine(b, func(b *testing.B, e sqltest.Engine, keyed bool) {
		ctx := context.Background()
		db := e.Open(b)
		schema := sqltest.Schema(b, db)
		m, err := optimistic.New(db, optimistic.WithSchema(schema), optimistic.WithLedger())
		if err != nil {
			b.Fatal(err)
		}
		if err := m.CreateTables(ctx); err != nil {
			b.Fatal(err)
		}
		sku := fmt.Sprintf("ledger-bytes-%011d", 0) // 24 bytes
		if err := m.Init(ctx, sku, inventory.MaxStock); err != nil {
			b.Fatal(err)
		}
		if err := writeLedger(ctx, m, sku, keyed); err != nil {
			b.Fatal(err)
		}
		size, err := tableBytes(ctx, db, sqldialect.MovesTable(sqldialect.Schema(schema)))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(size)/ledgerRows, "bytes/entry")
		b.ReportMetric(0, "ns/op")
	})
}

// BenchmarkTieredLedgerBytes measures what tiered's movement ledger takes
// per move. In Redis: the bytes its records add to the SKU's journal
// stream, which keeps them until synced (MEMORY USAGE ... SAMPLES 0 of the
// journal of a Manager with WithLedger, less that of one without, after
// the same ledgerRows-1 Reduces, with no syncer running). In SQL, per
// engine: the bytes of its moves table (tableBytes) and its rows per
// move, once the journal is synced. Keyed Reduces with a reference (a
// 24-byte SKU, a 20-byte key, a 16-byte reference) and unkeyed ones with
// none, from 16 goroutines, whose calls merge into journal entries of
// several records, a SQL row each. Run it with -benchtime 1x.
func BenchmarkTieredLedgerBytes(b *testing.B) {
	c := testenv.Redis(b)
	perEngine(b, func(b *testing.B, e sqltest.Engine, keyed bool) {
		ctx := context.Background()
		db := e.Open(b)
		prefix, tables := testenv.RedisPrefix(b, c), testenv.Prefix()+"_"
		sku := fmt.Sprintf("ledger-bytes-%011d", 0) // 24 bytes
		b.Cleanup(func() { dropTiered(b, db, tables) })
		// journal writes the moves through m, named name, and returns the
		// bytes of its journal stream (tiered's key: PREFIX:j{tag}:s:SKU).
		journal := func(m *tiered.Manager, name string) int64 {
			if err := writeLedger(ctx, m, sku, keyed); err != nil {
				b.Fatal(err)
			}
			n, err := c.MemoryUsage(ctx, rediskeys.Stock(prefix+name+":j", sku), 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
		side := func(name string, opts ...tiered.Option) *tiered.Manager {
			m, err := tiered.New(c, db, append([]tiered.Option{tiered.WithPrefix(prefix + name),
				tiered.WithTablePrefix(tables + name + "_")}, opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Close() })
			if err := m.CreateTables(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Init(ctx, sku, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			return m
		}
		on, off := side("on", tiered.WithLedger()), side("off")
		redisBytes := journal(on, "on") - journal(off, "off")
		for {
			n, err := on.Sync(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		moves := tables + "on_moves"
		size, err := tableBytes(ctx, db, moves)
		if err != nil {
			b.Fatal(err)
		}
		var rows int64
		if err := db.GetContext(ctx, &rows, "SELECT COUNT(*) FROM "+moves); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(redisBytes)/ledgerRows, "redis-bytes/move")
		b.ReportMetric(float64(size)/ledgerRows, "sql-bytes/move")
		b.ReportMetric(float64(rows)/ledgerRows, "rows/move")
		b.ReportMetric(0, "ns/op")
	})
}

// perEngine runs fn as a subtest per engine of sqltest.Benched and per
// kind of calls, ENGINE/keyed and ENGINE/unkeyed.
func perEngine(b *testing.B, fn func(b *testing.B, e sqltest.Engine, keyed bool)) {
	for _, e := range sqltest.Benched {
		for _, keyed := range []bool{true, false} {
			name := e.Name + "/keyed"
			if !keyed {
				name = e.Name + "/unkeyed"
			}
			b.Run(name, func(b *testing.B) { fn(b, e, keyed) })
		}
	}
}

// writeLedger writes the ledgerRows-1 Reduces of one unit of sku that,
// after its Init, make ledgerRows entries, from 16 goroutines (so merged
// where m merges): keyed with a reference (a 20-byte key, a 16-byte
// reference) when keyed. It returns the first error.
func writeLedger(ctx context.Context, m inventory.StockManager, sku string, keyed bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < ledgerRows-1; i += 16 {
				var opts []inventory.Option
				if keyed {
					opts = []inventory.Option{inventory.WithKey(fmt.Sprintf("buyer-%014d", i)),
						inventory.WithRef(fmt.Sprintf("order-%010d", i))}
				}
				if _, err := m.Reduce(ctx, sku, 1, opts...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil once closed and empty
}

// tableBytes is the size of table with its indexes, as db's engine counts it.
func tableBytes(ctx context.Context, db *sqlx.DB, table string) (int64, error) {
	var n int64
	var err error
	switch db.DriverName() {
	case "mysql":
		if _, err = db.ExecContext(ctx, "ANALYZE TABLE `"+table+"`"); err == nil {
			err = db.GetContext(ctx, &n, `SELECT data_length + index_length FROM information_schema.tables
				WHERE table_schema = DATABASE() AND table_name = ?`, table)
		}
	case "pgx":
		err = db.GetContext(ctx, &n, `SELECT pg_total_relation_size($1::regclass)`, `"`+table+`"`)
	default:
		err = db.GetContext(ctx, &n, `SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = ?)`, table)
	}
	return n, err
}

// BenchmarkLedgerCost measures what the movement ledger costs optimistic's
// unkeyed Reduce on one hot row, per call, beside its throughput: 64
// goroutines make ledgerCostCalls Reduces through a Manager without the
// ledger, then through one with it, in 5 alternating rounds, and each side
// reports its median of:
//   - the server's CPU time per call (MariaDB and PostgreSQL on private
//     servers that nothing else uses, /proc utime+stime of the server's
//     processes), or for SQLite, which runs in the test's
//     process, that process's CPU (getrusage, the Go client included);
//   - the statements the server ran per call (MariaDB: Questions);
//   - calls per second.
//
// The private PostgreSQL runs with fsync=off (faulttest), so its commits
// cost no disk flush, unlike the shared one's; MariaDB's flushes at each
// commit, as the shared one does. Run it with -benchtime 1x.
func BenchmarkLedgerCost(b *testing.B) {
	for _, name := range []string{"mariadb", "postgres", "sqlite"} {
		b.Run(name, func(b *testing.B) {
			db, cpu := costServer(b, name)
			schema := sqltest.Schema(b, db)
			ctx := context.Background()
			sides := map[string]*optimistic.Manager{}
			for _, side := range []string{"off", "on"} {
				var opts []optimistic.Option
				if side == "on" {
					opts = append(opts, optimistic.WithLedger())
				}
				m, err := optimistic.New(db, append(opts, optimistic.WithSchema(schema))...)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.CreateTables(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Init(ctx, "hot-"+side, inventory.MaxStock); err != nil {
					b.Fatal(err)
				}
				sides[side] = m
			}
			type figures struct{ cpu, stmts, ops []float64 }
			got := map[string]*figures{"off": {}, "on": {}}
			for round := range 5 {
				order := []string{"off", "on"}
				if round%2 == 1 {
					order = []string{"on", "off"}
				}
				for _, side := range order {
					c0, q0 := cpu(), questions(b, db)
					start := time.Now()
					if err := reduceMany(ctx, sides[side], "hot-"+side, ledgerCostCalls); err != nil {
						b.Fatal(err)
					}
					el := time.Since(start)
					f := got[side]
					f.cpu = append(f.cpu, (cpu()-c0)/ledgerCostCalls)
					f.stmts = append(f.stmts, float64(questions(b, db)-q0)/ledgerCostCalls)
					f.ops = append(f.ops, ledgerCostCalls/el.Seconds())
				}
			}
			for side, f := range got {
				b.ReportMetric(benchcmp.Median(f.cpu), side+"-cpu-µs/call")
				if db.DriverName() == "mysql" {
					b.ReportMetric(benchcmp.Median(f.stmts), side+"-statements/call")
				}
				b.ReportMetric(benchcmp.Median(f.ops), side+"-calls/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ledgerCostCalls is how many Reduces each side of BenchmarkLedgerCost
// makes per round.
const ledgerCostCalls = 20000

// reduceMany makes n Reduces of one unit of sku through m from 64
// goroutines, and returns the first error.
func reduceMany(ctx context.Context, m inventory.StockManager, sku string, n int64) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= n {
				if _, err := m.Reduce(ctx, sku, 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// costServer returns a pool on a private server of engine name (MariaDB,
// PostgreSQL) and a func that reads the server's CPU time so far in µs; for
// SQLite, a pool on a fresh file and the test process's own CPU time.
func costServer(b *testing.B, name string) (*sqlx.DB, func() float64) {
	switch name {
	case "mariadb":
		s := faulttest.StartMariaDB(b)
		pid := pidFile(b, filepath.Join(filepath.Dir(s.DataDir()), "mariadb.pid"))
		return s.Open(b, sqlConns), func() float64 { return groupCPU(b, pid) }
	case "postgres":
		s := faulttest.StartPostgres(b)
		pid := pidFile(b, filepath.Join(s.DataDir(), "postmaster.pid"))
		return s.Open(b, sqlConns), func() float64 { return groupCPU(b, pid) }
	}
	return testenv.SQLite(b), func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
	}
}

// pidFile returns the process id on the first line of file.
func pidFile(b *testing.B, file string) int {
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		b.Fatalf("%s: %v", file, err)
	}
	return pid
}

// groupCPU returns the CPU time (user and system) in µs of process pid,
// of its children that are alive (a postmaster's backends, which each
// call setsid) and of those it reaped.
func groupCPU(b *testing.B, pid int) float64 {
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		b.Fatal(err)
	}
	// After "pid (comm) ": state ppid pgrp ... utime(14) stime(15) cutime(16) cstime(17).
	fields := func(file string) []string {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil // gone meanwhile
		}
		_, rest, _ := strings.Cut(string(data), ") ")
		if f := strings.Fields(rest); len(f) >= 15 {
			return f
		}
		return nil
	}
	own, parent := fmt.Sprintf("/proc/%d/stat", pid), strconv.Itoa(pid)
	if fields(own) == nil {
		b.Fatalf("no process %d", pid)
	}
	var ticks int64
	for _, p := range procs {
		f := fields(p)
		if f == nil || (p != own && f[1] != parent) {
			continue
		}
		last := 13 // utime and stime
		if p == own {
			last = 15 // and the reaped children's
		}
		for _, v := range f[11:last] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return float64(ticks) * 1e6 / 100 // USER_HZ
}

// questions is MariaDB's count of statements run (Questions, global), 0
// on other engines.
func questions(b *testing.B, db *sqlx.DB) int64 {
	if db.DriverName() != "mysql" {
		return 0
	}
	var name string
	var n int64
	if err := db.QueryRowx("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}
