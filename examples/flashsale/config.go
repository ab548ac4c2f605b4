package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/retry"
)

// config is what the flags say.
type config struct {
	buyers      int
	stock       int64
	qty         int64
	repeat      float64
	concurrency int
	retries     int
	backoff     time.Duration
	timeout     time.Duration
	saleTimeout time.Duration
	keyTTL      time.Duration

	strategies string
	lockStores []string
	prefix     string

	redis    []string // empty: an embedded miniredis
	redlock  []string // empty: three embedded miniredis
	sqlite   string   // empty: a temporary file
	mysql    string   // empty: no MySQL rows
	postgres string   // empty: no PostgreSQL rows
	zk       []string // empty: zklock is skipped

	format   string
	wide     bool
	progress bool
	metrics  bool

	killRedisAt float64 // 0: no kill; else the share of the stock sold when the tiered rows' private Redis is killed

	carts   bool          // the cart sale (carts.go) instead of the single-SKU one
	skus    int           // SKUs of the cart sale, each with stock units
	abandon float64       // share of cart buyers who Reserve and never pay
	direct  float64       // share of cart buyers who ReduceLines, no hold
	holdTTL time.Duration // TTL of each hold
	reap    time.Duration // period of the reaper (inventory.Reap)
}

// Addresses of the servers `make services` starts. The INVENTORY_* variables
// that the tests read override them.
var serviceDefaults = []struct{ flag, env, def string }{
	{"redis", "INVENTORY_REDIS_ADDR", "127.0.0.1:6379"},
	{"redlock", "INVENTORY_REDLOCK_ADDRS", "127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382"},
	{"mysql", "INVENTORY_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test"},
	{"postgres", "INVENTORY_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
	{"zk", "INVENTORY_ZK_ADDRS", "127.0.0.1:2181"},
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	var c config
	var redisAddrs, redlockAddrs, zkAddrs, lockStores string
	fs := flag.NewFlagSet("flashsale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: flashsale [flags]\n\n"+
			"Races every stock strategy on one simulated flash sale and prints a table.\n"+
			"With no flags everything runs in process (miniredis, SQLite); flags point it at real servers.\n\n")
		fs.PrintDefaults()
	}

	fs.IntVar(&c.buyers, "buyers", 5000, "buyers in the sale, each a goroutine, all released together (with -carts the default is 2000)")
	fs.Int64Var(&c.stock, "stock", 100, "units on sale")
	fs.Int64Var(&c.qty, "qty", 1, "units each buyer asks for")
	fs.Float64Var(&c.repeat, "repeat", 0.1, "share of buyers (0..1) who click buy twice with the same idempotency key")
	fs.IntVar(&c.concurrency, "concurrency", 256, "most calls in flight at once")
	fs.IntVar(&c.retries, "retries", 10, "retries of a call refused with ErrContention or failed without a verdict")
	fs.DurationVar(&c.backoff, "backoff", 2*time.Millisecond, "first retry delay; it doubles on each retry up to 100x, each drawn within ±50% (package retry)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "deadline of each call, and of connecting to each server")
	fs.DurationVar(&c.saleTimeout, "sale-timeout", 5*time.Minute, "deadline of each strategy's sale; a sale that does not finish in time fails")
	fs.DurationVar(&c.keyTTL, "key-ttl", 10*time.Minute, "how long strategies keep idempotency keys")

	fs.StringVar(&c.strategies, "strategies", "all", "comma-separated strategies to run, by name ("+strategyNames+") or strategy/store (e.g. rowlock/mysql)")
	fs.StringVar(&lockStores, "lock-stores", "redis", "where the lock strategies (redislock, redlock, zklock) keep the stock: any of redis, sqlite, mysql, postgres")

	fs.StringVar(&redisAddrs, "redis", "", "Redis address, or comma-separated Redis Cluster nodes (default: an embedded miniredis)")
	fs.StringVar(&redlockAddrs, "redlock", "", "comma-separated independent Redis nodes for redlock, at least 3 (default: three embedded miniredis)")
	fs.StringVar(&c.sqlite, "sqlite", "", "SQLite database file (default: a temporary file, removed at exit)")
	fs.StringVar(&c.mysql, "mysql", "", "MariaDB/MySQL DSN, e.g. 'root@tcp(127.0.0.1:3306)/test' (default: no MySQL)")
	fs.StringVar(&c.postgres, "postgres", "", "PostgreSQL DSN, e.g. 'postgres://postgres@127.0.0.1:5432/test' (default: no PostgreSQL)")
	fs.StringVar(&zkAddrs, "zk", "", "comma-separated ZooKeeper servers (default: zklock does not run)")
	services := fs.Bool("services", false, "use the servers that make services starts for every flag above left unset (INVENTORY_* variables override their addresses)")

	fs.StringVar(&c.prefix, "prefix", "flashsale", "begins the sale's Redis keys and ZooKeeper root (/PREFIX/locks) and names its SQL tables (PREFIX_stock, PREFIX_ledger): lower-case letters, digits and _")
	fs.StringVar(&c.format, "format", "table", "output: table, csv or json")
	chart := fs.String("chart", "", "no longer drawn here: run with -format json and give the report to go run ./examples/flashsale/chart -o FILE.png (or .svg)")
	fs.BoolVar(&c.wide, "wide", false, "the table with every column (wider than 120 columns); csv and json always have them all")
	fs.BoolVar(&c.metrics, "metrics", false, "wrap each strategy in the otelstock decorator and print its counters beside the table (the sale fails if they disagree)")
	fs.Bool("sqllock", false, "no effect, kept for old command lines: sqllock runs on every MySQL and PostgreSQL store given")
	fs.BoolVar(&c.carts, "carts", false, "sell carts instead: each buyer 1-5 lines over -skus SKUs; some Reserve and never pay (-abandon), some ReduceLines (-direct), the others Reserve then Confirm; a reaper releases expired holds, and each SKU's stock is checked after they expire")
	fs.IntVar(&c.skus, "skus", 5, "with -carts: SKUs on sale, each with -stock units (each line asks 1..-qty units)")
	fs.Float64Var(&c.abandon, "abandon", 0.2, "with -carts: share of buyers (0..1) who Reserve and never pay")
	fs.Float64Var(&c.direct, "direct", 0.2, "with -carts: share of buyers (0..1) who buy with ReduceLines, without a hold")
	fs.DurationVar(&c.holdTTL, "hold-ttl", time.Second, "with -carts: TTL of each hold (1ms..30 days)")
	fs.DurationVar(&c.reap, "reap", 100*time.Millisecond, "with -carts: period of the reaper (inventory.Reap) that sweeps expired holds")
	fs.Float64Var(&c.killRedisAt, "kill-redis-at", 0, "run the tiered rows on a private redis-server (AOF, appendfsync always) and SIGKILL it once this share of the stock (0..1, exclusive) is sold: "+
		"SQL sells alone meanwhile (tiered refuses keyed calls then, so these rows' buyers have no keys), and Redis restarts from its AOF after the sale to be drained and reconciled (default: no kill)")
	fs.BoolVar(&c.progress, "progress", false, "show progress on stderr (default: when stderr is a terminal)")

	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, err
		}
		return nil, errUsage
	}
	if *chart != "" {
		fmt.Fprintf(stderr, "flashsale: -chart moved to its own command, so that the sale does not build the plotting library:\n"+
			"\tgo run ./examples/flashsale -format json | go run ./examples/flashsale/chart -o %s\n", *chart)
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "flashsale: unexpected arguments %q\n", fs.Args())
		return nil, errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.carts && !set["buyers"] {
		c.buyers = cartBuyers
	}
	if !set["progress"] {
		c.progress = isTerminal(stderr)
	}
	if *services {
		for _, d := range serviceDefaults {
			if set[d.flag] {
				continue
			}
			v := os.Getenv(d.env)
			if v == "" {
				v = d.def
			}
			_ = fs.Set(d.flag, v)
		}
	}
	c.redis, c.redlock, c.zk = list(redisAddrs), list(redlockAddrs), list(zkAddrs)
	c.lockStores = list(lockStores)
	return &c, c.validate(stderr)
}

func (c *config) validate(stderr io.Writer) error {
	var problems []string
	check := func(bad bool, format string, args ...any) {
		if bad {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(c.buyers < 1, "-buyers must be at least 1")
	check(c.stock < 0, "-stock must not be negative")
	check(c.qty < 1, "-qty must be at least 1")
	check(c.repeat < 0 || c.repeat > 1, "-repeat must lie in 0..1")
	check(c.concurrency < 1, "-concurrency must be at least 1")
	check(c.retries < 0, "-retries must not be negative")
	check(c.backoff <= 0, "-backoff must be positive")
	check(c.timeout <= 0, "-timeout must be positive")
	check(c.saleTimeout <= 0, "-sale-timeout must be positive")
	check(c.keyTTL < time.Millisecond, "-key-ttl must be at least 1ms")
	check(len(c.redlock) > 0 && len(c.redlock) < 3, "-redlock needs at least 3 nodes, got %d", len(c.redlock))
	check(!slices.Contains([]string{"table", "csv", "json"}, c.format), "-format must be table, csv or json")
	check(!prefixRE.MatchString(c.prefix), "-prefix %q: want a lower-case letter, then up to 39 lower-case letters, digits and _", c.prefix)
	check(c.skus < 1 || c.skus > 1000, "-skus must lie in 1..1000")
	check(c.abandon < 0 || c.direct < 0 || c.abandon+c.direct > 1, "-abandon and -direct must not be negative, and add up to at most 1")
	check(c.holdTTL < inventory.MinHoldTTL || c.holdTTL > inventory.MaxHoldTTL, "-hold-ttl must lie in %v..%v", inventory.MinHoldTTL, inventory.MaxHoldTTL)
	check(c.reap <= 0, "-reap must be positive")
	check(c.killRedisAt < 0 || c.killRedisAt >= 1, "-kill-redis-at must lie in 0..1 (0: no kill)")
	check(c.carts && c.killRedisAt > 0, "-kill-redis-at applies to the single-SKU sale's tiered rows, not to -carts")
	check(c.carts && c.metrics, "-metrics counts the single-SKU sale's Reduce calls: it does not apply to -carts")
	for _, s := range c.lockStores {
		check(!slices.Contains([]string{"redis", "sqlite", "mysql", "postgres"}, s), "-lock-stores: unknown store %q", s)
	}
	if len(problems) == 0 {
		return nil
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, "flashsale:", p)
	}
	return errUsage
}

// cartBuyers is -buyers' default with -carts: a cart takes up to five
// locks under the lock strategies.
const cartBuyers = 2000

// prefixRE is what -prefix accepts: a valid Redis key prefix, ZooKeeper
// node name and SQL identifier alike.
var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// oldNames are what -strategies still accepts for the baselines' former
// names.
var oldNames = map[string]string{"memory": "map", "ceiling": "bare-script"}

// selected reports whether -strategies asks for strategy over store.
func (c *config) selected(strategy, store string) bool {
	for _, s := range list(c.strategies) {
		if name, _, _ := strings.Cut(s, "/"); oldNames[name] != "" {
			s = oldNames[name] + strings.TrimPrefix(s, name)
		}
		if s == "all" || s == strategy || s == strategy+"/"+store {
			return true
		}
	}
	return false
}

// retryOptions are package retry's options for -retries and -backoff.
func (c *config) retryOptions() []retry.Option {
	return []retry.Option{retry.WithAttempts(c.retries + 1), retry.WithBackoff(c.backoff, 100*c.backoff)}
}

// repeaters is how many buyers click twice.
func (c *config) repeaters() int { return int(c.repeat*float64(c.buyers) + 0.5) }

// list splits a comma-separated flag, dropping empty items.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
