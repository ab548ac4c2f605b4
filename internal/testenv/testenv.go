// Package testenv connects tests to the real servers that `make services`
// starts on 127.0.0.1.
//
// Each address can be overridden by an environment variable. When a server
// does not answer, the test is skipped with a message naming `make services`,
// unless CI=true, in which case the test fails: in CI a missing server is a
// broken run, never a pass.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/go-zookeeper/zk"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// Environment variables and their defaults.
const (
	EnvRedis        = "INVENTORY_REDIS_ADDR"          // 127.0.0.1:6379
	EnvRedlock      = "INVENTORY_REDLOCK_ADDRS"       // 127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382
	EnvRedisCluster = "INVENTORY_REDIS_CLUSTER_ADDRS" // 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
	EnvMySQL        = "INVENTORY_MYSQL_DSN"           // root@tcp(127.0.0.1:3306)/test
	EnvPostgres     = "INVENTORY_POSTGRES_DSN"        // postgres://postgres@127.0.0.1:5432/test?sslmode=disable
	EnvZooKeeper    = "INVENTORY_ZK_ADDRS"            // 127.0.0.1:2181
)

// Defaults for the variables above.
const (
	DefaultRedis        = "127.0.0.1:6379"
	DefaultRedlock      = "127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382"
	DefaultRedisCluster = "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
	DefaultMySQL        = "root@tcp(127.0.0.1:3306)/test"
	DefaultPostgres     = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultZooKeeper    = "127.0.0.1:2181"
)

// Get returns the environment variable name, or def when it is unset.
func Get(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// List splits a comma-separated Get.
func List(name, def string) []string {
	return strings.Split(Get(name, def), ",")
}

// Missing skips t, or fails it when CI=true, because a server is missing.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not reachable (CI=true, so this fails): %v", what, err)
	}
	t.Skipf("%s is not reachable: %v; start the servers with `make services`", what, err)
}

func pingCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// Redis returns a client for the standalone Redis, closed at the end of t.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	addr := Get(EnvRedis, DefaultRedis)
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := pingCtx()
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Missing(t, "Redis at "+addr+" ($"+EnvRedis+")", err)
	}
	return c
}

// RedisReplica returns a client on the replica of the standalone Redis
// c that scripts/services.sh starts on 127.0.0.1:6390, closed at the end
// of t, after checking that c has a replica attached (Missing if not).
func RedisReplica(t testing.TB, c *redis.Client) *redis.Client {
	t.Helper()
	ctx, cancel := pingCtx()
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err == nil && strings.Contains(info, "connected_slaves:0") {
		err = errors.New("the primary has no replica: " + strings.TrimSpace(info))
	}
	if err != nil {
		Missing(t, "the replica of Redis 6379 on 127.0.0.1:6390", err)
	}
	r := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390", ContextTimeoutEnabled: true})
	t.Cleanup(func() { r.Close() })
	return r
}

// RedlockClients returns one client per independent Redlock node.
func RedlockClients(t testing.TB) []*redis.Client {
	t.Helper()
	var cs []*redis.Client
	for _, addr := range List(EnvRedlock, DefaultRedlock) {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		ctx, cancel := pingCtx()
		err := c.Ping(ctx).Err()
		cancel()
		if err != nil {
			Missing(t, "Redlock node Redis at "+addr+" ($"+EnvRedlock+")", err)
		}
		cs = append(cs, c)
	}
	return cs
}

// RedisCluster returns a client for the Redis Cluster, checked to be healthy.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := List(EnvRedisCluster, DefaultRedisCluster)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := pingCtx()
	defer cancel()
	info, err := c.ClusterInfo(ctx).Result()
	if err == nil && !strings.Contains(info, "cluster_state:ok") {
		err = errorString("cluster_state is not ok")
	}
	if err == nil {
		err = c.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return s.Ping(ctx).Err() })
	}
	if err != nil {
		Missing(t, "Redis Cluster at "+strings.Join(addrs, ",")+" ($"+EnvRedisCluster+")", err)
	}
	return c
}

type errorString string

func (e errorString) Error() string { return string(e) }

// maxConns bounds each test pool: go test runs two packages at once, and
// PostgreSQL allows 100 connections.
const maxConns = 24

func openSQL(t testing.TB, driver, dsn, what string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", what, err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := pingCtx()
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		Missing(t, what, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db
}

// MySQL returns a pool on the MariaDB/MySQL test database.
func MySQL(t testing.TB) *sqlx.DB {
	t.Helper()
	return openSQL(t, "mysql", Get(EnvMySQL, DefaultMySQL), "MariaDB/MySQL ($"+EnvMySQL+")")
}

// Postgres returns a pool on the PostgreSQL test database (pgx driver).
func Postgres(t testing.TB) *sqlx.DB {
	t.Helper()
	return openSQL(t, "pgx", Get(EnvPostgres, DefaultPostgres), "PostgreSQL ($"+EnvPostgres+")")
}

// SQLite returns a pool on a fresh SQLite file in t's temporary directory,
// in WAL mode with a busy timeout, as concurrent writers need, whose
// transactions begin IMMEDIATE (take the write lock at BEGIN).
//
// The root module does not require modernc.org/sqlite (a module that imports
// the library must not find it in its go.sum), so no file here registers the
// "sqlite" driver: `make test` links it into every test binary through an
// overlay kept in the integration module (integration/sqlite). Without it,
// SQLite is a missing server: skipped, or failed when CI=true.
func SQLite(t testing.TB) *sqlx.DB {
	t.Helper()
	return sqlite(t, "&_txlock=immediate")
}

// SQLiteDeferred is [SQLite] with the DSN the README shows: WAL and a busy
// timeout, and no _txlock, so that transactions begin DEFERRED and take
// the write lock at their first write. The library must be as correct on
// it as on SQLite's.
func SQLiteDeferred(t testing.TB) *sqlx.DB {
	t.Helper()
	return sqlite(t, "")
}

func sqlite(t testing.TB, params string) *sqlx.DB {
	t.Helper()
	if !slices.Contains(sql.Drivers(), "sqlite") {
		Missing(t, "SQLite", errorString(`no "sqlite" driver linked: run through make test (it adds integration/sqlite/driver.go.in as an overlay)`))
	}
	dsn := "file:" + t.TempDir() + "/stock.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" + params
	db := openSQL(t, "sqlite", dsn, "SQLite")
	db.SetMaxOpenConns(8)
	return db
}

// ZKRoot returns a lock root of its own for t, checked to be empty at the
// end (no lock directory left behind) and then removed.
func ZKRoot(t *testing.T, conn *zk.Conn) string {
	r := "/inventory-test/" + Prefix()
	t.Cleanup(func() {
		children, _, err := conn.Children(r)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrConnectionClosed) {
			return
		}
		if assert.NoError(t, err) {
			assert.Empty(t, children, "lock directories left behind under %s", r)
		}
		_ = conn.Delete(r, -1)
	})
	return r
}

// ZooKeeperAddrs returns the ZooKeeper servers' addresses once each takes
// a TCP connection. A refused connection is known at once: without this
// check a test waits for a session that cannot come before it skips.
func ZooKeeperAddrs(t testing.TB) []string {
	t.Helper()
	addrs := List(EnvZooKeeper, DefaultZooKeeper)
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			Missing(t, "ZooKeeper at "+a+" ($"+EnvZooKeeper+")", err)
		}
		c.Close()
	}
	return addrs
}

// ZooKeeper returns a connected ZooKeeper session, closed at the end of t.
func ZooKeeper(t testing.TB) *zk.Conn {
	t.Helper()
	addrs := ZooKeeperAddrs(t)
	c, ev, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		Missing(t, "ZooKeeper ($"+EnvZooKeeper+")", err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				return c
			}
		case <-deadline:
			Missing(t, "ZooKeeper at "+strings.Join(addrs, ",")+" ($"+EnvZooKeeper+")", errorString("no session within 5s"))
			return nil
		}
	}
}

// Prefix returns a random prefix, so tests sharing a server never collide.
func Prefix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// RedisPrefix returns a fresh key prefix for t and deletes every key that
// begins with it when t ends, on every shard of a Cluster client. Tests that
// write to a shared Redis use it so that nothing is left behind.
func RedisPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	p := Prefix()
	t.Cleanup(func() { DeleteKeys(t, c, p+"*") })
	return p
}

// DeleteKeys deletes every key matching pattern, on every shard of a Cluster
// client, and fails t if it cannot.
func DeleteKeys(t testing.TB, c redis.UniversalClient, pattern string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One UNLINK per key, pipelined: a Cluster node refuses a multi-key
	// command across slots.
	unlink := func(ctx context.Context, s *redis.Client, keys []string) error {
		_, err := s.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Unlink(ctx, k)
			}
			return nil
		})
		return err
	}
	del := func(ctx context.Context, s *redis.Client) error {
		iter := s.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 1000 {
				if err := unlink(ctx, s, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			return unlink(ctx, s, batch)
		}
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *redis.Client:
		err = del(ctx, c)
	default:
		t.Fatalf("testenv.DeleteKeys: unsupported client %T", c)
	}
	if err != nil {
		t.Errorf("delete keys %q: %v", pattern, err)
	}
}
