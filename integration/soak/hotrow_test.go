//go:build soak

package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	_ "github.com/stockkit/inventory/integration/sqlite" // registers "sqlite" for the processes' own pools
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

// hotRowChild is the environment variable that makes TestSoakHotRowChild
// one of TestSoakHotRow's processes: its value is a hotRowJob in JSON.
const hotRowChild = "INVENTORY_SOAK_HOTROW_CHILD"

// hotRowJob is what one process of TestSoakHotRow runs.
type hotRowJob struct {
	Driver, DSN string
	Schema      sqlstore.Schema
	SKU         string
	Goroutines  int
	Duration    time.Duration
	Seed        uint64
}

// hotRowPrefix marks the line of a child's output that holds its tally.
const hotRowPrefix = "HOTROW "

// TestSoakHotRow runs optimistic at default settings in four OS processes
// of 16 goroutines each, on one hot row of each SQL engine, for 10 s
// (SOAK_HOTROW_DURATION): mixed calls (sqltest.HotRow) from more stock
// than the run takes down to 0 and about there. No call may end in
// ErrContention, and the stock left must be what the processes' tallies
// say.
func TestSoakHotRow(t *testing.T) {
	d := 10 * time.Second
	if v := os.Getenv("SOAK_HOTROW_DURATION"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		must(t, err)
	}
	const processes, goroutines, initial = 4, 16, 20_000
	for _, e := range sqltest.Benched {
		t.Run(e.Name, func(t *testing.T) {
			db, driver, dsn := hotRowDB(t, e)
			schema := sqltest.Schema(t, db)
			m, err := optimistic.New(db, optimistic.WithSchema(schema))
			must(t, err)
			sku := testenv.Prefix()
			ctx := context.Background()
			must(t, m.Init(ctx, sku, initial))

			type proc struct {
				cmd *exec.Cmd
				out bytes.Buffer
			}
			procs := make([]*proc, processes)
			for i := range procs {
				job, err := json.Marshal(hotRowJob{Driver: driver, DSN: dsn, Schema: schema, SKU: sku,
					Goroutines: goroutines, Duration: d, Seed: uint64(i)})
				must(t, err)
				p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^TestSoakHotRowChild$", "-test.count=1")}
				p.cmd.Env = append(os.Environ(), hotRowChild+"="+string(job))
				p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
				must(t, p.cmd.Start())
				procs[i] = p
			}
			var total sqltest.Mix
			for i, p := range procs {
				if err := p.cmd.Wait(); err != nil {
					t.Fatalf("process %d: %v\n%s", i, err, p.out.String())
				}
				x, ok := hotRowTally(p.out.String())
				if !ok {
					t.Fatalf("process %d printed no tally:\n%s", i, p.out.String())
				}
				t.Logf("process %d: %+v", i, x)
				total.Add(x)
			}
			t.Logf("%s, %d processes x %d goroutines, %v: %+v, %.0f calls/s", e.Name, processes, goroutines, d, total, float64(total.Calls)/d.Seconds())
			require.Zero(t, total.Contention, "calls that ended in ErrContention")
			require.Positive(t, total.Refused, "the stock ran out")
			n, err := m.Get(ctx, sku)
			must(t, err)
			require.Equal(t, initial-total.Reduced+total.Returned, n, "the stock left")
		})
	}
}

// hotRowDB opens a pool on engine e and returns it with the driver name
// and DSN that the child processes open theirs with. SQLite's file is one
// of t's own.
func hotRowDB(t *testing.T, e sqltest.Engine) (db *sqlx.DB, driver, dsn string) {
	switch e.Name {
	case "mariadb":
		return e.Open(t), "mysql", testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL)
	case "postgres":
		return e.Open(t), "pgx", testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres)
	}
	dsn = "file:" + t.TempDir() + "/stock.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
	db, err := sqlx.Open("sqlite", dsn)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db, "sqlite", dsn
}

// hotRowTally finds the tally a child printed.
func hotRowTally(out string) (x sqltest.Mix, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if s, found := strings.CutPrefix(sc.Text(), hotRowPrefix); found {
			return x, json.Unmarshal([]byte(s), &x) == nil
		}
	}
	return x, false
}

// TestSoakHotRowChild is one process of TestSoakHotRow; it is skipped
// unless TestSoakHotRow started it.
func TestSoakHotRowChild(t *testing.T) {
	v := os.Getenv(hotRowChild)
	if v == "" {
		t.Skip("a process of TestSoakHotRow")
	}
	var job hotRowJob
	must(t, json.Unmarshal([]byte(v), &job))
	db, err := sqlx.Open(job.Driver, job.DSN)
	must(t, err)
	defer db.Close()
	db.SetMaxOpenConns(sqltest.Conns)
	db.SetMaxIdleConns(sqltest.Conns)
	m, err := optimistic.New(db, optimistic.WithSchema(job.Schema))
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), job.Duration+time.Minute)
	defer cancel()
	x, err := sqltest.HotRow(ctx, m, job.SKU, job.Goroutines, job.Duration, job.Seed, fmt.Sprint("p", job.Seed))
	must(t, err)
	b, err := json.Marshal(x)
	must(t, err)
	fmt.Printf("%s%s\n", hotRowPrefix, b)
}
