package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/zklock"
)

// refusalTTL is luascript's WithRefusals in the sale: a second of stale
// refusals after units come back from elsewhere (nothing does, here).
const refusalTTL = time.Second

// strategyNames lists what -strategies accepts, in the order of the report.
const strategyNames = "map, luascript, bare-script, tiered, optimistic, optimistic-single, rowlock, sqllock, redislock, redlock, zklock"

// schema names the sale's SQL tables after -prefix, apart from a service's
// own; -prefix also begins every Redis key and ZooKeeper path it writes.
func (b *backends) schema() sqlstore.Schema {
	p := b.cfg.prefix
	return sqlstore.Schema{Table: p + "_stock", Ledger: p + "_ledger", Holds: p + "_holds", Orders: p + "_orders"}
}

// target is one row of the report: a strategy over a store.
type target struct {
	strategy, store string
	open            func(ctx context.Context) (inventory.StockManager, error)
	skip            string // not empty: why the target cannot run, and how to make it
	where           string // where the stock (and the locks) live
	embedded        bool   // a server of the target runs in this process
	// keyless: the row is the bare script without idempotency keys (barescript.go);
	// its buyers call without a key, and a repeat click buys again.
	keyless bool
	// grace is how long after its TTL a hold may stay when its Reserve
	// failed midway: at most lockmgr.AbandonGrace for the lock strategies
	// (an incomplete order is given up the grace after it was recorded).
	grace time.Duration
}

// backends opens the servers the selected targets need, embedded ones where
// no address was given, each at most once, and closes them all at the end.
type backends struct {
	cfg    *config
	runID  string
	closes []func()

	redisClient redis.UniversalClient
	redlocks    []redis.UniversalClient
	zkConn      *zk.Conn
	zkEvents    <-chan zk.Event
	dbs         map[string]*sqlx.DB
	stores      map[string]redislock.Store
}

func newBackends(cfg *config) *backends {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &backends{cfg: cfg, runID: hex.EncodeToString(b), dbs: map[string]*sqlx.DB{}, stores: map[string]redislock.Store{}}
}

// close closes everything opened, last first.
func (b *backends) close() {
	for i := len(b.closes) - 1; i >= 0; i-- {
		b.closes[i]()
	}
}

// sqlNames are the SQL stores the flags make available.
func (b *backends) sqlNames() []string {
	names := []string{"sqlite"}
	if b.cfg.mysql != "" {
		names = append(names, "mysql")
	}
	if b.cfg.postgres != "" {
		names = append(names, "postgres")
	}
	return names
}

// targets lists every strategy over every store the flags make available.
func (b *backends) targets() []target {
	cfg := b.cfg
	ts := []target{
		{strategy: "map", store: "process", where: "a map in this process, no server", embedded: true, open: func(context.Context) (inventory.StockManager, error) {
			return inventorytest.NewMemory(cfg.keyTTL), nil
		}},
		{strategy: "luascript", store: "redis", where: b.where("redis"), embedded: b.embedded("redis"), open: func(ctx context.Context) (inventory.StockManager, error) {
			c, err := b.redis(ctx)
			if err != nil {
				return nil, err
			}
			// A flash sale's settings: concurrent calls merged into one
			// script call (the default, WithMaxBatch(DefaultMaxBatch)),
			// and unkeyed Reduces of a sold-out SKU refused in the process
			// (WithRefusals; the sale's buyers are keyed, and a keyed call
			// always goes to Redis, so here it is only what a service
			// would set).
			return luascript.New(c, luascript.WithPrefix(cfg.prefix), luascript.WithKeyTTL(cfg.keyTTL),
				luascript.WithRefusals(refusalTTL))
		}},
	}
	if !cfg.carts { // the bare script has no orders
		ceil := target{strategy: "bare-script", store: "redis", where: b.where("redis") + "; bare check-and-DECRBY EVALSHA, no keys", embedded: b.embedded("redis"), keyless: true,
			open: func(ctx context.Context) (inventory.StockManager, error) {
				c, err := b.redis(ctx)
				if err != nil {
					return nil, err
				}
				return newBareScript(ctx, c, cfg.prefix)
			}}
		if b.embedded("redis") {
			ceil.skip = "it measures a real Redis (miniredis starts a Lua interpreter per script): give -redis, or -services"
		}
		ts = append(ts, ceil)
	}
	for _, store := range b.sqlNames() {
		ts = append(ts, b.tieredTarget(store))
	}
	for _, store := range b.sqlNames() {
		sqlTarget := func(strategy string, open func(*sqlx.DB) (inventory.StockManager, error)) target {
			return target{strategy: strategy, store: store, where: b.where(store), open: func(ctx context.Context) (inventory.StockManager, error) {
				db, err := b.sql(ctx, store)
				if err != nil {
					return nil, err
				}
				return open(db)
			}}
		}
		ts = append(ts,
			sqlTarget("optimistic", func(db *sqlx.DB) (inventory.StockManager, error) {
				return optimistic.New(db, optimistic.WithSchema(b.schema()), optimistic.WithKeyTTL(cfg.keyTTL))
			}),
			sqlTarget("optimistic-single", func(db *sqlx.DB) (inventory.StockManager, error) {
				return optimistic.New(db, optimistic.WithSchema(b.schema()), optimistic.WithKeyTTL(cfg.keyTTL), optimistic.WithSingleStatement())
			}),
			sqlTarget("rowlock", func(db *sqlx.DB) (inventory.StockManager, error) {
				return rowlock.New(db, rowlock.WithSchema(b.schema()), rowlock.WithKeyTTL(cfg.keyTTL))
			}),
		)
		if store != "sqlite" { // advisory locks: MariaDB/MySQL and PostgreSQL
			tg := sqlTarget("sqllock", func(db *sqlx.DB) (inventory.StockManager, error) {
				s, err := sqlstore.New(db, sqlstore.WithSchema(b.schema()), sqlstore.WithKeyTTL(cfg.keyTTL))
				if err != nil {
					return nil, err
				}
				// The locks get a pool of their own: a held advisory lock
				// pins a connection, and each SKU's waiting caller one more.
				locks, err := sqlx.Open(db.DriverName(), b.dsn(store))
				if err != nil {
					return nil, err
				}
				b.closes = append(b.closes, func() { locks.Close() })
				locks.SetMaxOpenConns(32)
				return sqllock.New(locks, s)
			})
			tg.grace = lockmgr.AbandonGrace
			ts = append(ts, tg)
		}
	}
	for _, store := range cfg.lockStores {
		// lockTarget is strategy over store, built by lock from the store.
		lockTarget := func(strategy string, lock func(context.Context, redislock.Store) (inventory.StockManager, error)) target {
			tg := target{strategy: strategy, store: store, where: b.where(store) + "; locks: " + b.where(strategy), open: func(ctx context.Context) (inventory.StockManager, error) {
				s, err := b.store(ctx, store)
				if err != nil {
					return nil, err
				}
				return lock(ctx, s)
			}}
			tg.embedded = b.embedded(store) || b.embedded(strategy)
			tg.grace = lockmgr.AbandonGrace
			switch {
			case store != "redis" && !slices.Contains(b.sqlNames(), store):
				tg.skip = fmt.Sprintf("-lock-stores names %s: give its DSN with -%s", store, store)
			case strategy == "zklock" && len(cfg.zk) == 0:
				tg.skip = "it needs ZooKeeper: give -zk 127.0.0.1:2181 (started by `make services`), or -services"
			}
			return tg
		}
		ts = append(ts,
			lockTarget("redislock", func(ctx context.Context, s redislock.Store) (inventory.StockManager, error) {
				c, err := b.redis(ctx)
				if err != nil {
					return nil, err
				}
				return redislock.New(c, s, redislock.WithPrefix(cfg.prefix))
			}),
			lockTarget("redlock", func(ctx context.Context, s redislock.Store) (inventory.StockManager, error) {
				nodes, err := b.redlock(ctx)
				if err != nil {
					return nil, err
				}
				return redlock.New(nodes, s, redlock.WithPrefix(cfg.prefix+":redlock:"))
			}),
			lockTarget("zklock", func(ctx context.Context, s redislock.Store) (inventory.StockManager, error) {
				conn, events, err := b.zk(ctx)
				if err != nil {
					return nil, err
				}
				return zklock.New(conn, s, zklock.WithRoot("/"+cfg.prefix+"/locks"), zklock.WithSessionEvents(events))
			}),
		)
	}
	return ts
}

// sku is the SKU tg sells: unique to this run and target, so runs and
// targets sharing a server never meet.
func (b *backends) sku(tg target) string { return "flashsale-" + b.tag(tg) }

// tag names this run and tg: the cart sale's SKUs and hold ids contain it.
func (b *backends) tag(tg target) string {
	return fmt.Sprintf("%s-%s-%s", b.runID, tg.strategy, tg.store)
}

// forgetCarts deletes what tg's cart sale left: the SKUs and every row or
// key naming tag (holds, order records, idempotency keys).
func (b *backends) forgetCarts(tg target, tag string, skus []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if db := b.dbs[tg.store]; db != nil {
		like := "%" + tag + "%"
		s := b.schema()
		for _, q := range []string{
			"DELETE FROM " + s.Table + " WHERE sku LIKE ?",
			"DELETE FROM " + s.Ledger + " WHERE sku LIKE ? OR idem_key LIKE ?",
			"DELETE FROM " + s.Holds + " WHERE hold_id LIKE ? OR sku LIKE ?",
			"DELETE FROM " + s.Orders + " WHERE id LIKE ?",
		} {
			args := make([]any, strings.Count(q, "?"))
			for i := range args {
				args[i] = like
			}
			_, _ = db.ExecContext(ctx, db.Rebind(q), args...)
		}
	} else if tg.store == "redis" && b.redisClient != nil {
		deleteKeys(ctx, b.redisClient, b.cfg.prefix+"*"+tag+"*")
		// The order buckets' indexes are shared by the rows: take out the
		// row's orders a sweep had not finished yet.
		forgetMembers(ctx, b.redisClient, b.cfg.prefix+"{o*}:oi", "*"+tag+"*")
	}
}

// deleteKeys deletes the keys that match pattern, on every master of a
// Cluster.
func deleteKeys(ctx context.Context, client redis.UniversalClient, pattern string) {
	del := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	} else {
		_ = del(ctx, client)
	}
}

// forget deletes what tg's sale left: the stock, and the idempotency keys
// of the buyers who bought (any others expire after -key-ttl).
func (b *backends) forget(tg target, sku string, buyers []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if db := b.dbs[tg.store]; db != nil {
		for _, table := range []string{b.schema().Table, b.schema().Ledger} {
			_, _ = db.ExecContext(ctx, db.Rebind("DELETE FROM "+table+" WHERE sku = ?"), sku)
		}
	} else if tg.store == "redis" && b.redisClient != nil {
		// Every key of one SKU shares a hash tag: one DEL, even on a Cluster.
		keys := []string{rediskeys.Stock(b.cfg.prefix, sku)}
		for _, k := range buyers {
			keys = append(keys, rediskeys.Key(b.cfg.prefix, sku, driver.DirReduce, k))
		}
		b.redisClient.Del(ctx, keys...)
	}
}

// describe says where each store and lock service lives, for the report's
// header.
func (b *backends) describe() []string {
	c := b.cfg
	or := func(addrs []string, embedded string) string {
		if len(addrs) == 0 {
			return embedded
		}
		return strings.Join(addrs, ",")
	}
	sqlite := c.sqlite
	if sqlite == "" {
		sqlite = "temporary file"
	}
	d := []string{
		"redis: " + or(c.redis, "embedded miniredis"),
		"redlock: " + or(c.redlock, "3 embedded miniredis"),
		"sqlite: " + sqlite,
	}
	if c.mysql != "" {
		d = append(d, "mysql: given")
	}
	if c.postgres != "" {
		d = append(d, "postgres: given")
	}
	return append(d, "zookeeper: "+or(c.zk, "none"))
}

// store returns the lock strategies' store called name.
func (b *backends) store(ctx context.Context, name string) (redislock.Store, error) {
	if s := b.stores[name]; s != nil {
		return s, nil
	}
	var s redislock.Store
	if name == "redis" {
		c, err := b.redis(ctx)
		if err != nil {
			return nil, err
		}
		if s, err = redisstore.New(c, redisstore.WithPrefix(b.cfg.prefix), redisstore.WithKeyTTL(b.cfg.keyTTL)); err != nil {
			return nil, err
		}
	} else {
		db, err := b.sql(ctx, name)
		if err != nil {
			return nil, err
		}
		if s, err = sqlstore.New(db, sqlstore.WithSchema(b.schema()), sqlstore.WithKeyTTL(b.cfg.keyTTL)); err != nil {
			return nil, err
		}
	}
	b.stores[name] = s
	return s, nil
}

// dsn is the data source name of the SQL server name ("mysql", "postgres").
func (b *backends) dsn(name string) string {
	switch name {
	case "mysql":
		return b.cfg.mysql
	case "postgres":
		return b.cfg.postgres
	}
	return ""
}

// where says where a store or lock service lives, for the report and the
// chart: name is a store (redis, sqlite, mysql, postgres) or a lock
// strategy (redislock, redlock, zklock).
func (b *backends) where(name string) string {
	c := b.cfg
	switch name {
	case "redis", "redislock":
		switch len(c.redis) {
		case 0:
			return "embedded miniredis"
		case 1:
			return "Redis " + c.redis[0]
		}
		return fmt.Sprintf("Redis Cluster %s (%d nodes)", c.redis[0], len(c.redis))
	case "redlock":
		if len(c.redlock) == 0 {
			return "3 embedded miniredis"
		}
		return fmt.Sprintf("%d Redis %s…", len(c.redlock), c.redlock[0])
	case "zklock":
		if len(c.zk) == 0 {
			return "no ZooKeeper"
		}
		return "ZooKeeper " + strings.Join(c.zk, ",")
	case "sqlite":
		if c.sqlite == "" {
			return "SQLite temporary file"
		}
		return "SQLite " + c.sqlite
	case "mysql":
		if cfg, err := mysql.ParseDSN(c.mysql); err == nil {
			return "MariaDB/MySQL " + cfg.Addr
		}
		return "MariaDB/MySQL"
	case "postgres":
		if u, err := url.Parse(c.postgres); err == nil && u.Host != "" {
			return "PostgreSQL " + u.Host
		}
		return "PostgreSQL"
	}
	return name
}

// embedded reports whether the store or lock service name runs in this
// process (miniredis), so its speed is not a server's.
func (b *backends) embedded(name string) bool {
	switch name {
	case "redis", "redislock":
		return len(b.cfg.redis) == 0
	case "redlock":
		return len(b.cfg.redlock) == 0
	}
	return false
}

// sql returns a pool on the SQL database called name, its tables created.
func (b *backends) sql(ctx context.Context, name string) (*sqlx.DB, error) {
	if db := b.dbs[name]; db != nil {
		return db, nil
	}
	drv, dsn, conns := "", b.dsn(name), 64
	switch name {
	case "mysql":
		drv = "mysql"
	case "postgres":
		drv = "pgx"
	case "sqlite":
		path := b.cfg.sqlite
		if path == "" {
			dir, err := os.MkdirTemp("", "flashsale-")
			if err != nil {
				return nil, err
			}
			b.closes = append(b.closes, func() { os.RemoveAll(dir) })
			path = filepath.Join(dir, "stock.db")
		}
		// WAL lets readers run beside the one writer; writers wait for
		// each other for up to the busy timeout.
		drv, conns = "sqlite", 8
		dsn = "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
	}
	db, err := sqlx.Open(drv, dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b.closes = append(b.closes, func() { db.Close() })
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s, err := sqlstore.New(db, sqlstore.WithSchema(b.schema()))
	if err != nil {
		return nil, err
	}
	if err := s.CreateTables(ctx); err != nil {
		return nil, fmt.Errorf("%s: creating the tables: %w", name, err)
	}
	b.dbs[name] = db
	return db, nil
}

// zk returns a ZooKeeper session and its event channel.
func (b *backends) zk(ctx context.Context) (*zk.Conn, <-chan zk.Event, error) {
	if b.zkConn != nil {
		return b.zkConn, b.zkEvents, nil
	}
	conn, events, err := zk.Connect(b.cfg.zk, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return nil, nil, fmt.Errorf("zookeeper %s: %w", strings.Join(b.cfg.zk, ","), err)
	}
	b.closes = append(b.closes, conn.Close)
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		select {
		case e := <-events:
			if e.State != zk.StateHasSession {
				continue
			}
			b.zkConn, b.zkEvents = conn, events
			return conn, events, nil
		case <-wait.Done():
			return nil, nil, fmt.Errorf("zookeeper %s: no session: %w", strings.Join(b.cfg.zk, ","), wait.Err())
		}
	}
}

// redlock returns a client for every Redlock node: -redlock, or three
// embedded miniredis.
func (b *backends) redlock(ctx context.Context) ([]redis.UniversalClient, error) {
	if b.redlocks != nil {
		return b.redlocks, nil
	}
	addrs := b.cfg.redlock
	for len(addrs) < 3 {
		addr, err := b.miniredis()
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	var cs []redis.UniversalClient
	for _, addr := range addrs {
		// A Redlock node never resends a command: a dead node would cost
		// every lock attempt go-redis's retries, and a majority suffices.
		c, err := b.dialRedis(ctx, -1, addr)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	b.redlocks = cs
	return cs, nil
}

// redis returns the client of -redis, a Redis Cluster client when it names
// several nodes, or of an embedded miniredis.
func (b *backends) redis(ctx context.Context) (redis.UniversalClient, error) {
	if b.redisClient != nil {
		return b.redisClient, nil
	}
	addrs := b.cfg.redis
	if len(addrs) == 0 {
		addr, err := b.miniredis()
		if err != nil {
			return nil, err
		}
		addrs = []string{addr}
	}
	c, err := b.dialRedis(ctx, 0, addrs...)
	if err != nil {
		return nil, err
	}
	b.redisClient = c
	return c, nil
}

// dialRedis connects to a Redis server, or to a Redis Cluster when given
// several addresses, with a pool big enough for -concurrency. Each call's
// ctx bounds its network I/O (ContextTimeoutEnabled); maxRetries is
// go-redis's MaxRetries (0: its default, -1: never resend).
func (b *backends) dialRedis(ctx context.Context, maxRetries int, addrs ...string) (redis.UniversalClient, error) {
	c := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 addrs,
		PoolSize:              min(b.cfg.concurrency, 256),
		PoolTimeout:           b.cfg.timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            maxRetries,
	})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: %w", strings.Join(addrs, ","), err)
	}
	b.closes = append(b.closes, func() { c.Close() })
	return c, nil
}

// miniredis starts an embedded Redis server and returns its address.
func (b *backends) miniredis() (string, error) {
	s, err := miniredis.Run()
	if err != nil {
		return "", fmt.Errorf("starting miniredis: %w", err)
	}
	b.closes = append(b.closes, s.Close)
	return s.Addr(), nil
}
