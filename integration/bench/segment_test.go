package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/segment"
	"github.com/stockkit/inventory/sqlstore"
)

// segmentChild is the environment variable that makes
// TestSegmentBenchChild one process of BenchmarkSegments: its value is a
// segmentJob in JSON.
const segmentChild = "INVENTORY_BENCH_SEGMENT_CHILD"

// segmentJob is what one process of BenchmarkSegments runs.
type segmentJob struct {
	Driver, DSN string
	Schema      sqlstore.Schema
	SKU         string
	Kind        string // "segment" (8 segments) or "optimistic" (unsegmented)
	Goroutines  int
}

// BenchmarkSegments compares, on one hot SKU of MariaDB and PostgreSQL,
// 64 goroutines in all, every side in OS processes of its own (children of
// the benchmark, each with its own pool of 16 connections, as separate
// servers would be; a turn tells them to go and sums the calls they ended
// within it):
//   - segment (8 segments) in four processes against optimistic in one
//     process (issue 33's target: at least 1.0x);
//   - segment (8 segments) in four processes against optimistic in four
//     (the target: at least 2x).
//
// Calls are unkeyed Reduces of one unit from MaxStock; ErrContention is
// retried and counted in the note.
//
// BenchmarkSegmentsLastPercent, below, says what the last 1% of a sale
// costs.
func BenchmarkSegments(b *testing.B) {
	for _, e := range sqltest.Benched[:2] {
		b.Run(e.Name, func(b *testing.B) {
			db, driver, dsn := segmentDB(b, e)
			schema := segmentSchema(b, db)
			ctx := context.Background()
			hot := testenv.Prefix()
			seg, err := segment.New(db, segment.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			opt, err := optimistic.New(db, optimistic.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			if err := seg.Init(ctx, hot, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			if err := opt.Init(ctx, hot, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			server := serverProbe(b, db)
			side := func(kind string, procs int) (benchcmp.Side, *childGroup) {
				cg := startChildren(b, procs, segmentJob{Driver: driver, DSN: dsn, Schema: schema, SKU: hot, Kind: kind, Goroutines: 64 / procs})
				cg.server = server
				name := fmt.Sprintf("%s, %d processes", kind, procs)
				if kind == "segment" {
					name = fmt.Sprintf("segment (8 segments), %d processes", procs)
				}
				return benchcmp.Side{Name: name + ", " + engineNames[e.Name], Turn: cg.turn}, cg
			}
			for _, r := range []struct {
				variant string
				procs   int // the baseline's
			}{
				{"segments 4 processes vs optimistic 1 process", 1},
				{"segments 4 processes vs optimistic 4 processes", 4},
			} {
				strategy, sg := side("segment", 4)
				baseline, bg := side("optimistic", r.procs)
				benchcmp.Run(b, benchcmp.Case{
					Group:      "segments",
					Name:       engineNames[e.Name] + ", " + r.variant + ", hot",
					Layout:     hot1.String(),
					Goroutines: 64,
					Strategy:   strategy,
					Baseline:   baseline,
					Note: func() string {
						return fmt.Sprintf("ErrContention retried: segment %s, optimistic %s; segment %s, optimistic %s",
							sg.contentionNote(), bg.contentionNote(), sg.serverNote(), bg.serverNote())
					},
				})
				sg.stop()
				bg.stop()
				b.Logf("%s, %s: ErrContention retried: segment %s, optimistic %s; segment %s, optimistic %s; load %s",
					engineNames[e.Name], r.variant, sg.contentionNote(), bg.contentionNote(), sg.serverNote(), bg.serverNote(), loadavg())
			}
		})
	}
}

var hot1 = layout{"hot", 1}

// segmentDB opens a pool on engine e, sized for the benchmark, and returns
// it with the driver name and DSN that the child processes open theirs with.
func segmentDB(b *testing.B, e sqltest.Engine) (db *sqlx.DB, driver, dsn string) {
	db = e.Open(b)
	fillPool(b, db, 4)
	if e.Name == "mariadb" {
		return db, "mysql", testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL)
	}
	return db, "pgx", testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres)
}

// segmentSchema returns fresh tables, the segments table among them, all
// dropped at the end of b.
func segmentSchema(b *testing.B, db *sqlx.DB) sqlstore.Schema {
	schema := sqltest.Schema(b, db)
	m, err := segment.New(db, segment.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.CreateTables(context.Background()); err != nil {
		b.Fatal(err)
	}
	sqltest.Drop(b, db, m.Table())
	return schema
}

// childGroup is the processes of one side: each waits for "go <duration>"
// on its stdin, runs its calls for that long and answers
// "done <calls> <contention>".
type childGroup struct {
	procs      []*child
	contention atomic.Int64
	calls      atomic.Int64
	// server reads the database server's CPU (µs) and statements run
	// (MariaDB's Questions; 0 on PostgreSQL), around each turn: what the
	// side's calls cost the server.
	server           func() (cpu float64, stmts int64)
	serverCPU, stmts atomic.Int64
	once             sync.Once
}

type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	log strings.Builder
}

// startChildren starts n processes of job and waits until each has opened
// its pool.
func startChildren(b *testing.B, n int, job segmentJob) *childGroup {
	b.Helper()
	cg := &childGroup{}
	spec, err := json.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestSegmentBenchChild$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(), segmentChild+"="+string(spec))
		c.cmd.Stderr = &c.log
		if c.in, err = c.cmd.StdinPipe(); err != nil {
			b.Fatal(err)
		}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		c.out = bufio.NewScanner(stdout)
		if err := c.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cg.procs = append(cg.procs, c)
	}
	b.Cleanup(cg.stop)
	for i, c := range cg.procs {
		if _, err := c.expect("ready"); err != nil {
			b.Fatalf("process %d: %v\n%s", i, err, c.log.String())
		}
	}
	return cg
}

// expect reads the child's output up to a line that starts with word, and
// returns the rest of that line.
func (c *child) expect(word string) (string, error) {
	for c.out.Scan() {
		if rest, ok := strings.CutPrefix(c.out.Text(), word); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	return "", fmt.Errorf("the process ended without %q: %v", word, c.out.Err())
}

// turn runs one turn of the side: every process for d at once.
func (cg *childGroup) turn(ctx context.Context, _ int, d time.Duration, _ int) (float64, error) {
	for _, c := range cg.procs {
		if _, err := fmt.Fprintf(c.in, "go %s\n", d); err != nil {
			return 0, err
		}
	}
	cpu0, stmts0 := cg.server()
	defer func() {
		cpu1, stmts1 := cg.server()
		cg.serverCPU.Add(int64(cpu1 - cpu0))
		cg.stmts.Add(stmts1 - stmts0)
	}()
	var calls int64
	for i, c := range cg.procs {
		rest, err := c.expect("done")
		if err != nil {
			return 0, fmt.Errorf("process %d: %w\n%s", i, err, c.log.String())
		}
		var n, gave int64
		if _, err := fmt.Sscan(rest, &n, &gave); err != nil {
			return 0, fmt.Errorf("process %d answered %q: %w", i, rest, err)
		}
		calls += n
		cg.calls.Add(n)
		cg.contention.Add(gave)
	}
	return float64(calls) / d.Seconds(), ctx.Err()
}

func (cg *childGroup) contentionNote() string {
	return fmt.Sprintf("%d of %d calls", cg.contention.Load(), cg.calls.Load())
}

// serverNote says what a call of the side cost the database server: its
// CPU and, on MariaDB, its statements.
func (cg *childGroup) serverNote() string {
	calls := float64(max(cg.calls.Load(), 1))
	s := fmt.Sprintf("%.0f µs server CPU", float64(cg.serverCPU.Load())/calls)
	if n := cg.stmts.Load(); n > 0 {
		s += fmt.Sprintf(", %.3f statements", float64(n)/calls)
	}
	return s + " a call"
}

// serverProbe returns what childGroup.server reads of db's server, which
// runs on this host.
func serverProbe(b *testing.B, db *sqlx.DB) func() (float64, int64) {
	var file string
	if db.DriverName() == "mysql" {
		if err := db.Get(&file, "SELECT @@pid_file"); err != nil {
			b.Fatal(err)
		}
	} else {
		var dir string
		if err := db.Get(&dir, "SHOW data_directory"); err != nil {
			b.Fatal(err)
		}
		file = filepath.Join(dir, "postmaster.pid")
	}
	pid := pidFile(b, file)
	return func() (float64, int64) { return groupCPU(b, pid), questions(b, db) }
}

// stop ends the processes (closing their stdin) and waits for them.
func (cg *childGroup) stop() {
	cg.once.Do(func() {
		for _, c := range cg.procs {
			_ = c.in.Close()
		}
		for _, c := range cg.procs {
			_ = c.cmd.Wait()
		}
	})
}

// TestSegmentBenchChild is one process of BenchmarkSegments; it is skipped
// unless BenchmarkSegments started it.
func TestSegmentBenchChild(t *testing.T) {
	v := os.Getenv(segmentChild)
	if v == "" {
		t.Skip("a process of BenchmarkSegments")
	}
	var job segmentJob
	if err := json.Unmarshal([]byte(v), &job); err != nil {
		t.Fatal(err)
	}
	db, err := sqlx.Open(job.Driver, job.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(sqltest.Conns)
	db.SetMaxIdleConns(sqltest.Conns)
	var m inventory.StockManager
	if job.Kind == "segment" {
		m, err = segment.New(db, segment.WithSchema(job.Schema))
	} else {
		m, err = optimistic.New(db, optimistic.WithSchema(job.Schema))
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.Get(ctx, job.SKU); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		d, err := time.ParseDuration(strings.TrimPrefix(in.Text(), "go "))
		if err != nil {
			t.Fatal(err)
		}
		n, gave, err := hammer(ctx, m, job.SKU, job.Goroutines, d)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("done", n, gave)
	}
}

// hammer reduces one unit of sku from g goroutines for d, and returns how
// many calls ended within d and how many ErrContention answers came (each
// retried, and counted as no call).
func hammer(ctx context.Context, m inventory.StockManager, sku string, g int, d time.Duration) (calls, gave int64, err error) {
	var n, contention atomic.Int64
	var first atomic.Pointer[error]
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for time.Now().Before(end) {
				_, err := m.Reduce(ctx, sku, 1)
				switch {
				case err == nil:
					if time.Now().Before(end) {
						n.Add(1)
					}
				case errors.Is(err, inventory.ErrContention):
					contention.Add(1)
				default:
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return 0, 0, *p
	}
	return n.Load(), contention.Load(), nil
}

// BenchmarkSegmentsLastPercent sells a SKU of 20,000 units out through
// four segment Managers (16 goroutines each, one pool each, in this
// process), and reports the calls per second over the first 99% of the
// units ("first99-ops/s") and over the last 1% ("last1-ops/s"), and
// their ratio ("last1/first99"): the price of the SKU path, taken once
// the segments drain.
func BenchmarkSegmentsLastPercent(b *testing.B) {
	const units, managers, g = 20_000, 4, 16
	for _, e := range sqltest.Benched[:2] {
		b.Run(e.Name, func(b *testing.B) {
			db, _, _ := segmentDB(b, e)
			schema := segmentSchema(b, db)
			ms := make([]*segment.Manager, managers)
			for i := range ms {
				pool := e.Open(b)
				fillPool(b, pool, 16)
				m, err := segment.New(pool, segment.WithSchema(schema))
				if err != nil {
					b.Fatal(err)
				}
				ms[i] = m
			}
			ctx := context.Background()
			sku := testenv.Prefix()
			if err := ms[0].Init(ctx, sku, units); err != nil {
				b.Fatal(err)
			}
			lastPercent(b, e.Name, units, managers*g, func(w int) error {
				_, err := ms[w%managers].Reduce(ctx, sku, 1)
				return err
			})
		})
	}
}

// lastPercent sells out a SKU of units, Init'ed already, with workers
// goroutines calling reduce (a Reduce of one unit, by worker w) until it
// says ErrInsufficientStock (again after ErrContention), and reports the
// calls per second over the first 99% of the units and over the last 1%,
// and their ratio.
func lastPercent(b *testing.B, name string, units int64, workers int, reduce func(w int) error) {
	var sold atomic.Int64
	var cut atomic.Int64 // when the 99th percent sold, Unix ns
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for w := range workers {
		wg.Go(func() {
			for {
				err := reduce(w)
				switch {
				case err == nil:
					if sold.Add(1) == units*99/100 {
						cut.Store(time.Now().UnixNano())
					}
				case errors.Is(err, inventory.ErrInsufficientStock):
					return
				case errors.Is(err, inventory.ErrContention):
				default:
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	end := time.Now()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	if sold.Load() != units {
		b.Fatalf("sold %d of %d", sold.Load(), units)
	}
	mid := time.Unix(0, cut.Load())
	first := float64(units*99/100) / mid.Sub(start).Seconds()
	last := float64(units/100) / end.Sub(mid).Seconds()
	b.ReportMetric(first, "first99-ops/s")
	b.ReportMetric(last, "last1-ops/s")
	b.ReportMetric(last/first, "last1/first99")
	b.Logf("%s: first 99%% at %.0f calls/s, last 1%% (%d units) at %.0f calls/s (%v), load %s",
		name, first, units/100, last, end.Sub(mid).Round(time.Millisecond), loadavg())
}

// loadavg is the 1-, 5- and 15-minute load average, for the log.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
