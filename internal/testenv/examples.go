package testenv

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
)

// A Server is a server that Examples reach at its default address, written
// out in the Example as documentation writes it.
type Server struct {
	what, env, def string
	ping           func(ctx context.Context, addr string) error
}

// The servers of the Examples, at the default addresses.
var (
	RedisServer     = Server{"Redis", EnvRedis, DefaultRedis, pingRedis}
	RedlockServers  = Server{"the Redlock nodes", EnvRedlock, DefaultRedlock, pingRedlock}
	MySQLServer     = Server{"MariaDB/MySQL", EnvMySQL, DefaultMySQL, pingSQL("mysql")}
	PostgresServer  = Server{"PostgreSQL", EnvPostgres, DefaultPostgres, pingSQL("pgx")}
	ZooKeeperServer = Server{"ZooKeeper", EnvZooKeeper, DefaultZooKeeper, pingZooKeeper}
)

// check reports why s cannot serve an Example, or nil. An Example uses the
// default address; when the environment points the tests elsewhere, the
// default is not the server under test.
func (s Server) check() error {
	if got := Get(s.env, s.def); got != s.def {
		return fmt.Errorf("%s: the Examples use %s, $%s names %s", s.what, s.def, s.env, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.ping(ctx, s.def); err != nil {
		return fmt.Errorf("%s at %s is not reachable: %v", s.what, s.def, err)
	}
	return nil
}

func pingRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Ping(ctx).Err()
}

func pingRedlock(ctx context.Context, addrs string) error {
	for _, a := range strings.Split(addrs, ",") {
		if err := pingRedis(ctx, a); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
	}
	return nil
}

func pingSQL(driver string) func(ctx context.Context, dsn string) error {
	return func(ctx context.Context, dsn string) error {
		db, err := sqlx.Open(driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	}
}

func pingZooKeeper(ctx context.Context, addrs string) error {
	list := strings.Split(addrs, ",")
	for _, a := range list { // a refused connection answers at once
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		if err != nil {
			return err
		}
		c.Close()
	}
	conn, events, err := zk.Connect(list, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		select {
		case e := <-events:
			if e.State == zk.StateHasSession {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("no session: %w", ctx.Err())
		}
	}
}

// The Examples left out of this test binary, and why.
var (
	examplesMu  sync.Mutex
	examplesOut []string
)

// SkipExamplesWithout is for a TestMain, before m.Run: it leaves the
// Examples whose names match pattern (such as "^Example$") out of the run
// (go test -skip) unless every one of servers answers at its default
// address, and records why for [ExamplesRan]. An Example cannot skip
// itself, and without its server it would fail (or log.Fatal) on a machine
// where every test skips. It parses the command line (flag.Parse), as
// m.Run would.
func SkipExamplesWithout(pattern string, servers ...Server) {
	var why []string
	for _, s := range servers {
		if err := s.check(); err != nil {
			why = append(why, err.Error())
		}
	}
	if len(why) == 0 {
		return
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	skip := flag.Lookup("test.skip")
	if skip == nil {
		panic("testenv.SkipExamplesWithout: no -test.skip flag: call it from TestMain")
	}
	v := pattern
	if old := skip.Value.String(); old != "" {
		v = old + "|" + pattern
	}
	if err := skip.Value.Set(v); err != nil {
		panic(err)
	}
	examplesMu.Lock()
	examplesOut = append(examplesOut, fmt.Sprintf("Examples %s not run: %s", pattern, strings.Join(why, "; ")))
	examplesMu.Unlock()
}

// ExamplesRan is for a test beside the Examples: it reports the Examples
// that [SkipExamplesWithout] left out, by skipping t with the reason, or,
// when CI=true, failing it, since in CI a missing server is a broken run.
// It passes when every Example runs.
func ExamplesRan(t *testing.T) {
	t.Helper()
	examplesMu.Lock()
	out := strings.Join(examplesOut, "; ")
	examplesMu.Unlock()
	if out != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true, so this fails)", out)
		}
		t.Skipf("%s; start the servers with `make services`", out)
	}
}
