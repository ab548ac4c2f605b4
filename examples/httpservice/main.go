// Command httpservice is the seed of a flash-sale service: an HTTP endpoint
// that sells stock through any strategy of github.com/stockkit/inventory,
// chosen by a flag.
//
//	go run ./examples/httpservice -strategy rowlock -init sneaker-42=100
//	go run ./examples/httpservice -strategy luascript -redis 127.0.0.1:6379
//	go run ./examples/httpservice -strategy zklock -zk 127.0.0.1:2181 -store sql \
//	    -sql-driver pgx -dsn 'postgres://postgres@127.0.0.1:5432/test'
//	go run ./examples/httpservice -strategy sqllock -sql-driver mysql -dsn 'root@tcp(127.0.0.1:3306)/test'
//	go run ./examples/httpservice -strategy tiered -redis 127.0.0.1:6379 -init sneaker-42=100
//
// -strategy is luascript, optimistic, rowlock, sqllock (advisory locks of
// MariaDB/MySQL or PostgreSQL, on a pool of their own), redislock, redlock,
// zklock or tiered (Redis before the SQL of -sql-driver and -dsn, with a
// syncer running in the service).
//
// # API
//
// POST /buy with {"sku": "sneaker-42", "buyer": "b-17", "qty": 1} (qty
// defaults to 1) sells qty units to the buyer. The buyer id is the
// idempotency key, so each buyer buys a SKU at most once, and a client may
// retry a request that timed out without fear of buying twice. Answers, each
// a JSON object with a status:
//
//	200 bought          {"status":"bought","sku":...,"remaining":41}
//	200 already_bought  the buyer had bought already; remaining is as the first time;
//	                    nothing more was taken. A retry after a timeout lands here
//	                    when the first request went through: the buyer did buy.
//	409 sold_out        fewer than qty units are left; remaining says how many
//	404 not_found       unknown SKU, or unknown path
//	405 method_not_allowed  the path takes another method; Allow names it
//	400 invalid         bad JSON (or data after the object, or a body shorter than its
//	                    Content-Length), SKU, missing or bad buyer id, or quantity
//	503 busy            the strategy gave up under contention; Retry-After: 1
//	504 timeout         the backend did not answer within -timeout; retry with the same buyer
//	503 unavailable     the backend failed; Retry-After: 1; retry with the same buyer
//
// GET /stock/{sku} answers {"status":"ok","sku":...,"stock":n,"held":h} (held:
// units in holds not yet released), or 404 and 400 as above.
//
// # History: the movement ledger
//
// With -ledger (any strategy), every move is recorded with the move
// (package ledger): optimistic and rowlock in their tables, luascript in a
// stream per SKU, tiered in SQL (its syncer writes the Redis moves' rows,
// and a read syncs the SKU first), and the lock strategies (sqllock,
// redislock, redlock, zklock) through their -store, sqlstore.WithLedger or
// redisstore.WithLedger. A Redis stream (luascript, -store redis) is
// trimmed to about -ledger-max-len stream entries per SKU, 0 keeping every
// one. GET /history/{sku}?after=N&limit=M answers up to M (1..1000,
// default 100) entries of the SKU's ledger after position N (default 0:
// from the first), in order, and next, the after of the next page (a page
// shorter than M is the end for now):
//
//	200 ok               {"status":"ok","sku":...,"entries":[{"pos":17,"kind":"reduce",
//	                     "units":1,"available":41,"held":0,"sold":59,"key":"b-17",
//	                     "time":"2026-12-05T23:40:01.123456Z"}],"next":17}; entries is
//	                     left out when there are none. key is the call's idempotency
//	                     key (the buyer id of POST /buy), hold the order id of the
//	                     entries of POST /reserve, /confirm, /cancel and of expiry
//	404 not_found        no such SKU
//	400 invalid          a bad SKU, after or limit not an integer, limit outside 1..1000,
//	                     after negative
//	501 not_implemented  the service keeps no ledger (no -ledger)
//
// and 503 busy, 504 timeout, 503 unavailable as for /buy. The route is
// /history/{sku}, not /stock/{sku}/history: a SKU may hold a slash. The
// history names buyers: serve it to operators only.
//
// # Orders: hold, pay, release
//
// POST /reserve with {"order": "o-17", "lines": [{"sku": "shirt", "qty": 2},
// {"sku": "hat", "qty": 1}], "ttl_ms": 900000} holds every line (or none)
// for ttl_ms (default -hold-ttl, 15m) under the buyer's order id, which is
// the hold's id and idempotency key: a retry holds the cart once. POST
// /confirm with {"order": "o-17"} sells the held units; POST /cancel with
// the same body gives them back. An unpaid hold's units come back by
// themselves once its TTL has passed: the service's reaper sweeps every
// -reap (1s), and any call that moves a SKU releases its expired holds.
//
//	200 reserved           {"status":"reserved","order":"o-17","ttl_ms":900000}
//	200 already_reserved   the order id is held, or ended recently; nothing more was taken
//	409 sold_out           some lines do not fit; "short" lists them with the units
//	                       available, [{"sku":"hat","qty":5,"available":1}]; nothing was taken
//	200 confirmed          POST /confirm: the units are sold
//	200 already_confirmed  confirmed before (a retry after a timeout lands here); nothing changed
//	410 released           POST /confirm: the hold expired or was cancelled; its units are back
//	200 cancelled          POST /cancel; also for a hold cancelled or expired already
//	409 confirmed          POST /cancel of a confirmed order: a refund is a return; nothing changed
//	404 not_found          no such order (or it ended more than the key TTL ago), or unknown SKU
//	400 invalid            bad JSON, order id, lines (1..100, each SKU once, qty >= 1) or ttl_ms
//	501 not_implemented    the strategy has no holds
//
// and 503 busy, 504 timeout, 503 unavailable as for /buy, retried with the
// same order id.
//
// A request whose client went away before its answer is logged at debug
// level, not as a backend error.
//
// SQL strategies use a pool of at most -sql-conns connections (default 32;
// sqllock a second one of that size for its locks), so a burst of
// requests queues for a connection, each within -timeout, instead of
// going past the server's connection limit. -init sku=qty creates
// a SKU only when it does not exist yet (-init-force overwrites it), so a
// restart does not put sold stock back.
//
// # Metrics and rate limits
//
// GET /metrics serves the stock calls' metrics in the Prometheus text
// format (the OpenTelemetry Prometheus exporter over otelstock): calls by
// operation and outcome (inventory_client_operations_total), their duration
// (inventory_client_operation_duration_seconds), calls in flight and units
// moved; beside them the Go runtime's metrics (go_*) and the process's
// (process_*). No series carries an empty label: the exporter's
// otel_scope_* labels are left out (one scope, otelstock). -rate limits the
// purchases of the whole service to that many per second and -rate-per-sku
// those of each SKU (package ratelimit; bursts of up to -burst and
// -burst-per-sku, one second's worth by default); a purchase over a limit
// is answered 503 busy with Retry-After: 1, before it reaches the backend,
// and counted with outcome contention. The handler logs failures itself,
// with the request, so the service stacks otelstock over ratelimit without
// slogstock.
//
// The server stops gracefully on SIGINT or SIGTERM: it stops accepting,
// lets requests in flight finish (for up to -shutdown-timeout), then closes
// the backend clients.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/time/rate"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/examples/internal/cli"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/otelstock"
	"github.com/stockkit/inventory/ratelimit"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/tiered"
	"github.com/stockkit/inventory/zklock"
)

func main() { cli.Main("httpservice", run) }

// errUsage reports bad flags; the flag package has already said why.
var errUsage = cli.ErrUsage

type config struct {
	addr            string
	strategy        string
	store           string
	redis           string
	redlock         string
	zk              string
	sqlDriver       string
	dsn             string
	timeout         time.Duration
	shutdownTimeout time.Duration
	sqlConns        int
	init            map[string]int64
	initForce       bool
	rate            float64
	ratePerSKU      float64
	burst           int
	burstPerSKU     int
	holdTTL         time.Duration
	ledger          bool
	ledgerMaxLen    int64
	reap            time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := config{init: map[string]int64{}}
	fs := flag.NewFlagSet("httpservice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&c.strategy, "strategy", "rowlock", strategies)
	fs.StringVar(&c.store, "store", "redis", "where redislock, redlock and zklock keep the stock: redis (-redis) or sql (-sql-driver, -dsn)")
	fs.StringVar(&c.redis, "redis", "127.0.0.1:6379", "Redis address, or comma-separated Redis Cluster nodes")
	fs.StringVar(&c.redlock, "redlock", "127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382", "comma-separated independent Redis servers for redlock, at least 3")
	fs.StringVar(&c.zk, "zk", "127.0.0.1:2181", "comma-separated ZooKeeper servers for zklock")
	fs.StringVar(&c.sqlDriver, "sql-driver", "sqlite", "SQL driver: sqlite, mysql or pgx")
	fs.StringVar(&c.dsn, "dsn", "file:stock.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)", "SQL data source name; the tables are created if absent")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "deadline of each request's stock call")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a shutdown waits for requests in flight")
	fs.IntVar(&c.sqlConns, "sql-conns", 32, "most connections the SQL pool opens (and keeps idle); keep it below the server's limit (MariaDB max_connections, 151 by default; PostgreSQL 100), shared by every instance of the service")
	fs.Float64Var(&c.rate, "rate", 0, "most purchases per second for the whole service, in bursts of up to -burst; 0: no limit")
	fs.Float64Var(&c.ratePerSKU, "rate-per-sku", 0, "most purchases per second of each SKU, in bursts of up to -burst-per-sku; 0: no limit")
	fs.IntVar(&c.burst, "burst", 0, "most purchases at once under -rate (default: one second's worth, at least 1)")
	fs.IntVar(&c.burstPerSKU, "burst-per-sku", 0, "most purchases of one SKU at once under -rate-per-sku (default: one second's worth, at least 1)")
	fs.DurationVar(&c.holdTTL, "hold-ttl", 15*time.Minute, "TTL of a POST /reserve hold that gives no ttl_ms: unpaid after that, its units come back")
	fs.DurationVar(&c.reap, "reap", time.Second, "how often a reaper releases expired holds (inventory.Reap), so that their units come back even when nobody touches the SKU; 0: only lazily, by the calls that move it")
	fs.BoolVar(&c.initForce, "init-force", false, "let -init overwrite the stock of a SKU that exists already")
	fs.BoolVar(&c.ledger, "ledger", false, "keep a movement ledger, which GET /history/{sku} serves (any -strategy; the lock strategies keep it in their -store)")
	fs.Int64Var(&c.ledgerMaxLen, "ledger-max-len", 0, "with -ledger, luascript and the lock strategies over -store redis: trim each SKU's ledger stream to about its last n stream entries; 0: keep every entry")
	fs.Func("init", "`sku=qty`: create sku with qty units at start, unless it exists already (see -init-force); repeatable, for trying the service out", func(s string) error {
		i := strings.LastIndexByte(s, '=')
		if i < 0 {
			return errors.New("want sku=qty")
		}
		n, err := strconv.ParseInt(s[i+1:], 10, 64)
		if err != nil {
			return err
		}
		c.init[s[:i]] = n
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, err
		}
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "httpservice: unexpected arguments %q\n", fs.Args())
		return nil, errUsage
	}
	if c.sqlConns < 1 {
		fmt.Fprintln(stderr, "httpservice: -sql-conns must be at least 1")
		return nil, errUsage
	}
	if c.holdTTL < inventory.MinHoldTTL || c.holdTTL > inventory.MaxHoldTTL || c.reap < 0 {
		fmt.Fprintf(stderr, "httpservice: -hold-ttl must lie in %v..%v and -reap must not be negative\n", inventory.MinHoldTTL, inventory.MaxHoldTTL)
		return nil, errUsage
	}
	if c.ledgerMaxLen < 0 {
		fmt.Fprintln(stderr, "httpservice: -ledger-max-len must not be negative")
		return nil, errUsage
	}
	if !(c.rate >= 0) || !(c.ratePerSKU >= 0) || c.burst < 0 || c.burstPerSKU < 0 {
		fmt.Fprintln(stderr, "httpservice: -rate, -rate-per-sku, -burst and -burst-per-sku must not be negative")
		return nil, errUsage
	}
	return &c, nil
}

// run serves until ctx is done, then shuts the server down gracefully. It
// prints the address it listens on to stdout and logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	bare, closeStock, err := newManager(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStock()
	stock, metrics, stopMetrics, err := instrument(bare, cfg)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if err := initStock(ctx, stock, cfg, log); err != nil {
		return err
	}
	if om, ok := stock.(inventory.OrderManager); ok && cfg.reap > 0 {
		reapCtx, stopReap := context.WithCancel(context.Background())
		reaped := make(chan struct{})
		go func() {
			defer close(reaped)
			_ = inventory.Reap(reapCtx, om, cfg.reap, func(err error) { log.Warn("sweeping expired holds", "err", err) })
		}()
		defer func() { stopReap(); <-reaped }()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/", newHandler(stock, cfg.timeout, cfg.holdTTL, log))

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      cfg.timeout + 10*time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening on http://%s, strategy %s\n", ln.Addr(), cfg.strategy)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "cause", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// instrument stacks the decorators over m: otelstock, whose metrics the
// returned handler serves, over ratelimit's buckets (-rate, -rate-per-sku).
// stop shuts the meter provider down.
func instrument(m inventory.StockManager, cfg *config) (inventory.StockManager, http.Handler, func(), error) {
	// burst is b, or one second's worth of r, at least 1.
	burst := func(b int, r float64) int {
		if b > 0 {
			return b
		}
		return max(1, int(min(r, 1e9)))
	}
	var limits []ratelimit.Option
	if cfg.rate > 0 {
		limits = append(limits, ratelimit.WithGlobal(rate.Limit(cfg.rate), burst(cfg.burst, cfg.rate)))
	}
	if cfg.ratePerSKU > 0 {
		limits = append(limits, ratelimit.WithPerSKU(rate.Limit(cfg.ratePerSKU), burst(cfg.burstPerSKU, cfg.ratePerSKU)))
	}
	m, err := ratelimit.Wrap(m, limits...)
	if err != nil {
		return nil, nil, nil, err
	}
	// The Go runtime's and the process's metrics beside the stock calls';
	// the calls' series carry no otel_scope_* labels (one scope, otelstock:
	// its version would sit on every series, its schema URL empty).
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	stop := func() { _ = mp.Shutdown(context.Background()) }
	if m, err = otelstock.Wrap(m, otelstock.WithMeterProvider(mp), otelstock.WithStrategy(cfg.strategy)); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), stop, nil
}

// initStock applies -init: it creates each SKU that does not exist yet, and
// overwrites one that does only with -init-force, so a restart does not put
// back stock that was sold. (Two instances starting at once may both see a
// SKU missing; -init is for trying the service out, not for provisioning.)
func initStock(ctx context.Context, stock inventory.StockManager, cfg *config, log *slog.Logger) error {
	for sku, n := range cfg.init {
		if !cfg.initForce {
			cur, err := stock.Get(ctx, sku)
			if err == nil {
				log.Info("-init: SKU exists, stock kept; -init-force overwrites it", "sku", sku, "stock", cur)
				continue
			}
			if !errors.Is(err, inventory.ErrNotFound) {
				return fmt.Errorf("-init %s=%d: %w", sku, n, err)
			}
		}
		if err := stock.Init(ctx, sku, n); err != nil {
			return fmt.Errorf("-init %s=%d: %w", sku, n, err)
		}
	}
	return nil
}

// newManager builds the strategy that cfg names: the one place that knows
// which strategy the service runs. The returned function closes its clients.
func newManager(ctx context.Context, cfg *config) (inventory.StockManager, func(), error) {
	b := &backends{cfg: cfg}
	m, err := b.manager(ctx)
	if err != nil {
		b.close()
		return nil, nil, fmt.Errorf("%s: %w", cfg.strategy, err)
	}
	return m, b.close, nil
}

// backends opens the clients a strategy needs and closes them.
type backends struct {
	cfg     *config
	closers []func()
}

func (b *backends) manager(ctx context.Context) (inventory.StockManager, error) {
	switch b.cfg.strategy {
	case "luascript":
		return luascript.New(b.redis(b.cfg.redis), b.luascriptOptions()...)
	case "optimistic":
		return b.sqlManager(ctx, func(db *sqlx.DB) (sqlManager, error) {
			if b.cfg.ledger {
				return optimistic.New(db, optimistic.WithLedger())
			}
			return optimistic.New(db)
		})
	case "rowlock":
		return b.sqlManager(ctx, func(db *sqlx.DB) (sqlManager, error) {
			if b.cfg.ledger {
				return rowlock.New(db, rowlock.WithLedger())
			}
			return rowlock.New(db)
		})
	case "sqllock":
		s, err := b.sqlStore(ctx)
		if err != nil {
			return nil, err
		}
		// The advisory locks get a pool of their own: a held lock pins
		// a connection, and each SKU's waiting caller one more.
		locks, err := b.open()
		if err != nil {
			return nil, err
		}
		return sqllock.New(locks, s)
	case "tiered":
		return b.tiered(ctx)
	case "redislock":
		s, err := b.store(ctx)
		if err != nil {
			return nil, err
		}
		return redislock.New(b.redis(b.cfg.redis), s)
	case "redlock":
		var nodes []redis.UniversalClient
		for _, addr := range strings.Split(b.cfg.redlock, ",") {
			nodes = append(nodes, b.redlockNode(addr))
		}
		s, err := b.store(ctx)
		if err != nil {
			return nil, err
		}
		return redlock.New(nodes, s)
	case "zklock":
		conn, events, err := zk.Connect(strings.Split(b.cfg.zk, ","), 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, conn.Close)
		s, err := b.store(ctx)
		if err != nil {
			return nil, err
		}
		return zklock.New(conn, s, zklock.WithSessionEvents(events))
	}
	return nil, fmt.Errorf("unknown -strategy; want %s", strategies)
}

// strategies are the values of -strategy.
const strategies = "luascript, optimistic, rowlock, sqllock, redislock, redlock, zklock or tiered"

// luascriptOptions are luascript's options: WithLedger with -ledger.
func (b *backends) luascriptOptions() []luascript.Option {
	if b.cfg.ledger {
		return []luascript.Option{luascript.WithLedger(b.cfg.ledgerMaxLen)}
	}
	return nil
}

// sqlManager is a SQL strategy's Manager.
type sqlManager interface {
	inventory.StockManager
	CreateTables(ctx context.Context) error
}

// sqlManager returns the Manager that build makes over the database, its
// tables created (with -ledger, the ledger's among them).
func (b *backends) sqlManager(ctx context.Context, build func(db *sqlx.DB) (sqlManager, error)) (inventory.StockManager, error) {
	db, _, err := b.sql(ctx)
	if err != nil {
		return nil, err
	}
	m, err := build(db)
	if err != nil {
		return nil, err
	}
	if b.cfg.ledger {
		if err := m.CreateTables(ctx); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// tiered returns a tiered Manager over -redis and the SQL of -sql-driver
// and -dsn (keeping a ledger with -ledger), its tables created, and a
// syncer running until the service closes its clients: the syncer moves
// Redis's sales to SQL.
func (b *backends) tiered(ctx context.Context) (inventory.StockManager, error) {
	db, _, err := b.sql(ctx)
	if err != nil {
		return nil, err
	}
	var opts []tiered.Option
	if b.cfg.ledger {
		opts = append(opts, tiered.WithLedger())
	}
	m, err := tiered.New(b.redis(b.cfg.redis), db, opts...)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func() { m.Close() })
	if err := m.CreateTables(ctx); err != nil {
		return nil, err
	}
	syncCtx, stop := context.WithCancel(context.Background())
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		_ = m.Run(syncCtx)
	}()
	b.closers = append(b.closers, func() { stop(); <-synced })
	return m, nil
}

// store is where redislock, redlock and zklock keep the stock (and, with
// -ledger, the ledger).
func (b *backends) store(ctx context.Context) (redislock.Store, error) {
	switch b.cfg.store {
	case "redis":
		var opts []redisstore.Option
		if b.cfg.ledger {
			opts = append(opts, redisstore.WithLedger(b.cfg.ledgerMaxLen))
		}
		return redisstore.New(b.redis(b.cfg.redis), opts...)
	case "sql":
		return b.sqlStore(ctx)
	}
	return nil, fmt.Errorf("-store %q: want redis or sql", b.cfg.store)
}

// sqlStore is the sqlstore.Store of the lock strategies, its tables
// created: with -ledger, it keeps the ledger.
func (b *backends) sqlStore(ctx context.Context) (*sqlstore.Store, error) {
	var opts []sqlstore.Option
	if b.cfg.ledger {
		opts = append(opts, sqlstore.WithLedger())
	}
	_, s, err := b.sql(ctx, opts...)
	return s, err
}

// redis returns a client of one Redis server, or of a Redis Cluster when
// addrs names several nodes. Each call's ctx bounds its network I/O
// (ContextTimeoutEnabled), so -timeout holds while Redis hangs.
func (b *backends) redis(addrs string) redis.UniversalClient {
	return b.redisClient(&redis.UniversalOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true})
}

// redlockNode returns a client of one Redlock node. It never resends a
// command (MaxRetries -1): a dead node would cost every lock attempt
// go-redis's retries, and Redlock needs only a majority.
func (b *backends) redlockNode(addr string) redis.UniversalClient {
	return b.redisClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true, MaxRetries: -1})
}

func (b *backends) redisClient(opts *redis.UniversalOptions) redis.UniversalClient {
	c := redis.NewUniversalClient(opts)
	b.closers = append(b.closers, func() { c.Close() })
	return c
}

// open opens a pool of -sql-conns connections on the database.
func (b *backends) open() (*sqlx.DB, error) {
	db, err := sqlx.Open(b.cfg.sqlDriver, b.cfg.dsn)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, func() { db.Close() })
	// An unbounded pool opens a connection per request in flight, and the
	// server refuses those past its limit ("Too many connections"): a
	// bounded pool makes requests queue for a connection instead, each
	// within its -timeout.
	db.SetMaxOpenConns(b.cfg.sqlConns)
	db.SetMaxIdleConns(b.cfg.sqlConns)
	return db, nil
}

// sql opens the database and creates the tables of a sqlstore.Store made
// with opts if they are absent.
func (b *backends) sql(ctx context.Context, opts ...sqlstore.Option) (*sqlx.DB, *sqlstore.Store, error) {
	db, err := b.open()
	if err != nil {
		return nil, nil, err
	}
	s, err := sqlstore.New(db, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := s.CreateTables(ctx); err != nil {
		return nil, nil, err
	}
	return db, s, nil
}

func (b *backends) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}
