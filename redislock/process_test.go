//go:build linux

package redislock_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// childEnv carries a childConfig to TestPausedHolderChild, which runs only
// as the child of TestPausedHolderProcess.
const childEnv = "INVENTORY_REDISLOCK_PAUSED_CHILD"

// childConfig says where the child finds the locks and the stock.
type childConfig struct {
	Redis      string
	LockPrefix string
	TTL        time.Duration
	// Store is "redis" (Prefix) or "sqlite" (DSN, Table, Ledger).
	Store, Prefix      string
	DSN, Table, Ledger string
	SKU                string
	Qty                int64
	Blind              bool // write without compare-and-set
}

const pausedTTL = time.Second

// TestPausedHolderProcess runs a lock holder in a separate process (this
// test binary again): it locks a SKU, reads its stock and, between its
// checks and its write, stops itself (SIGSTOP), renewal and all. Its lock
// lapses; meanwhile this process sells the remaining stock with its own
// Manager. Then the child continues (SIGCONT) and attempts its write, which
// the compare-and-set refuses: the child retries, finds the stock gone and
// says so. The control, a child that writes without compare-and-set,
// oversells, and the invariant check sees it.
func TestPausedHolderProcess(t *testing.T) {
	for _, store := range []string{"redis", "sqlite"} {
		for _, blind := range []bool{false, true} {
			name := store
			if blind {
				name += " without CAS"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c := testenv.Redis(t)
				cfg := childConfig{Redis: c.Options().Addr, LockPrefix: lockPrefix(t, c), TTL: pausedTTL,
					Store: store, SKU: "last units", Qty: 2, Blind: blind}
				s := childStore(t, c, &cfg)
				const initial = 3
				parent, err := redislock.New(c, s, redislock.WithPrefix(cfg.LockPrefix), redislock.WithTTL(cfg.TTL))
				require.NoError(t, err)
				require.NoError(t, parent.Init(ctx, cfg.SKU, initial))

				child := startChild(t, cfg)
				child.expect(t, "paused")
				require.NoError(t, faulttest.Eventually(ctx, child.stopped), "the child stopped itself")
				n, err := c.Exists(ctx, redislock.LockKey(cfg.LockPrefix, cfg.SKU)).Result()
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "the child holds the lock")

				// The child's lock lapses; the parent takes it and sells
				// everything.
				var sold int64
				for i := 0; ; i++ {
					_, err := parent.Reduce(ctx, cfg.SKU, 1, inventory.WithKey(fmt.Sprintf("parent-%d", i)))
					if errors.Is(err, inventory.ErrInsufficientStock) {
						break
					}
					require.NoError(t, err)
					sold++
				}
				require.EqualValues(t, initial, sold, "the parent sold the stock the child had read")
				require.NoError(t, child.stopped(), "the child slept through the sale")

				require.NoError(t, syscall.Kill(child.cmd.Process.Pid, syscall.SIGCONT))
				var outcome string
				var rem int64
				_, err = fmt.Sscanf(child.expect(t, "outcome"), "outcome %s %d", &outcome, &rem)
				require.NoError(t, err)
				child.wait(t)

				final, err := parent.Get(ctx, cfg.SKU)
				require.NoError(t, err)
				childTook := int64(0)
				if outcome == "ok" {
					childTook = cfg.Qty
				}
				t.Logf("initial %d, parent sold %d, child %s (took %d, said %d left), final %d",
					initial, sold, outcome, childTook, rem, final)
				require.GreaterOrEqual(t, final, int64(0))
				if blind {
					require.Equal(t, "ok", outcome, "the unconditional write goes through")
					require.NotEqual(t, int64(initial)-final, sold+childTook, "and sells stock that was gone: the check sees it")
					return
				}
				require.Equal(t, "insufficient", outcome, "the child's write was refused; its retry found the stock gone")
				require.EqualValues(t, 0, rem)
				require.Equal(t, int64(initial)-final, sold+childTook, "initial - final == sold")
			})
		}
	}
}

// childStore makes the parent's store and tells cfg where it is.
func childStore(t *testing.T, c *redis.Client, cfg *childConfig) redislock.Store {
	if cfg.Store == "redis" {
		cfg.Prefix = testenv.RedisPrefix(t, c)
		s, err := redisstore.New(c, redisstore.WithPrefix(cfg.Prefix))
		require.NoError(t, err)
		return s
	}
	cfg.DSN = "file:" + t.TempDir() + "/stock.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
	db := openSQLite(t, cfg.DSN)
	schema := sqltest.Schema(t, db)
	cfg.Table, cfg.Ledger = schema.Table, schema.Ledger
	s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	require.NoError(t, err)
	return s
}

func openSQLite(t *testing.T, dsn string) *sqlx.DB {
	db, err := sqlx.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// childProc is a running child and the lines it reports.
type childProc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
}

func startChild(t *testing.T, cfg childConfig) *childProc {
	t.Helper()
	js, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedHolderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &childProc{cmd: cmd, lines: make(chan string, 100), stderr: new(bytes.Buffer)}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a stopped child dies too
		<-scanned
		_ = cmd.Wait()
	})
	return p
}

// expect returns the child's next report, which must begin with word.
func (p *childProc) expect(t *testing.T, word string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("the child ended before reporting %q; stderr:\n%s", word, p.stderr)
			}
			if r, ok := strings.CutPrefix(l, "child: "); ok {
				require.True(t, strings.HasPrefix(r, word), "the child reported %q, expected %q", r, word)
				return r
			}
			t.Logf("child: %s", l)
		case <-timeout:
			t.Fatalf("the child never reported %q", word)
		}
	}
}

// stopped reports, as an error, whether the child is not stopped.
func (p *childProc) stopped() error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return err
	}
	// pid (comm) state ...
	if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) == 0 || f[0] != "T" {
		return fmt.Errorf("child state %v, not T (stopped)", f[:1])
	}
	return nil
}

// wait waits for the child to exit and checks that it succeeded.
func (p *childProc) wait(t *testing.T) {
	t.Helper()
	for l := range p.lines {
		t.Logf("child: %s", l)
	}
	require.NoError(t, p.cmd.Wait(), "child stderr:\n%s", p.stderr)
}

// TestPausedHolderChild is the child of TestPausedHolderProcess. It reduces
// with a store that stops the whole process (SIGSTOP) just before the
// write, and reports "paused", then "outcome CLASS REMAINING", on stdout.
func TestPausedHolderChild(t *testing.T) {
	js := os.Getenv(childEnv)
	if js == "" {
		t.Skip("runs only as the child of TestPausedHolderProcess")
	}
	var cfg childConfig
	require.NoError(t, json.Unmarshal([]byte(js), &cfg))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: cfg.Redis})
	defer c.Close()
	var s redislock.Store
	var err error
	if cfg.Store == "redis" {
		s, err = redisstore.New(c, redisstore.WithPrefix(cfg.Prefix))
	} else {
		s, err = sqlstore.New(openSQLite(t, cfg.DSN), sqlstore.WithSchema(sqlstore.Schema{Table: cfg.Table, Ledger: cfg.Ledger}))
	}
	require.NoError(t, err)
	// SIGSTOP stops the other threads a moment after kill returns: wait
	// for the SIGCONT, lest this goroutine write before it stops.
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	ps := &pausingStore{Store: s, blind: cfg.Blind, pause: func() {
		fmt.Println("child: paused")
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGSTOP))
		<-cont
	}}
	m, err := redislock.New(c, ps, redislock.WithPrefix(cfg.LockPrefix), redislock.WithTTL(cfg.TTL))
	require.NoError(t, err)
	rem, err := m.Reduce(ctx, cfg.SKU, cfg.Qty, inventory.WithKey("child"))
	outcome := "ok"
	switch {
	case errors.Is(err, inventory.ErrInsufficientStock):
		outcome = "insufficient"
	case errors.Is(err, inventory.ErrContention):
		outcome = "contention"
	case err != nil:
		t.Fatalf("child: reduce: %v", err)
	}
	fmt.Printf("child: outcome %s %d\n", outcome, rem)
}
