// Command reconcile runs tiered's Manager.Reconcile against a Redis and a
// SQL database and prints, per SKU, what it found: SQL's pool, grants and
// sales, Redis's allotment, and the drift (units lost with Redis's state,
// excess allotment, grants Redis had missed). Reconcile repairs as it goes,
// without ever creating a unit; run it after Redis restarted or lost its
// state, and before it takes traffic again.
//
//	go run ./examples/reconcile -redis 127.0.0.1:6379 -mysql 'root@tcp(127.0.0.1:3306)/test'
//	go run ./examples/reconcile -redis 127.0.0.1:6379 -postgres 'postgres://postgres@127.0.0.1:5432/test' sku-1 sku-2
//
// With no SKU arguments it reconciles every SKU of tiered's SKU table. The
// key and table prefixes must be those of the tiered.Manager that sells
// (-prefix, -table-prefix). It exits with status 3 when a SKU had drift, 1
// on an error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/stockkit/inventory/examples/internal/cli"
	"github.com/stockkit/inventory/tiered"
)

func main() { cli.Main("reconcile", run, cli.Exit{Err: errDrift, Code: 3}) }

var (
	errUsage = cli.ErrUsage
	errDrift = errors.New("drift found")
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisAddrs := fs.String("redis", "127.0.0.1:6379", "Redis address, or comma-separated Redis Cluster nodes")
	mysqlDSN := fs.String("mysql", "", "MariaDB/MySQL DSN of tiered's tables, e.g. 'root@tcp(127.0.0.1:3306)/test'")
	pgDSN := fs.String("postgres", "", "PostgreSQL DSN of tiered's tables, e.g. 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'")
	sqlitePath := fs.String("sqlite", "", "SQLite database file of tiered's tables")
	prefix := fs.String("prefix", tiered.DefaultPrefix, "tiered's Redis key prefix (tiered.WithPrefix)")
	tablePrefix := fs.String("table-prefix", tiered.DefaultTablePrefix, "tiered's SQL table prefix (tiered.WithTablePrefix)")
	timeout := fs.Duration("timeout", time.Minute, "deadline of the whole run")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: reconcile [flags] [sku...]\n\nRuns tiered's Reconcile (which repairs) and prints the drift per SKU; every SKU when none is given.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	driver, dsn := "", ""
	for _, d := range []struct{ driver, dsn string }{{"mysql", *mysqlDSN}, {"pgx", *pgDSN}, {"sqlite", *sqlitePath}} {
		if d.dsn == "" {
			continue
		}
		if driver != "" {
			fmt.Fprintln(stderr, "reconcile: give one of -mysql, -postgres and -sqlite")
			return errUsage
		}
		driver, dsn = d.driver, d.dsn
	}
	if driver == "" {
		fmt.Fprintln(stderr, "reconcile: give the SQL database: -mysql, -postgres or -sqlite")
		return errUsage
	}
	if driver == "sqlite" {
		dsn = "file:" + dsn + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	db, err := sqlx.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(*redisAddrs, ","), ContextTimeoutEnabled: true})
	defer rdb.Close()
	m, err := tiered.New(rdb, db, tiered.WithPrefix(*prefix), tiered.WithTablePrefix(*tablePrefix))
	if err != nil {
		return err
	}
	defer m.Close()
	drifts, err := m.Reconcile(ctx, fs.Args()...)
	if len(drifts) > 0 {
		if werr := write(stdout, drifts); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	for _, d := range drifts {
		if !d.Clean() {
			return errDrift
		}
	}
	return nil
}

// write prints one row per SKU: SQL's figures, Redis's, and the drift.
func write(w io.Writer, drifts []tiered.Drift) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sku\tgen\tpool\tgranted\tsold\treturned\tdirect\tunsynced\tallotment\texpected\tlost\texcess\tgrants applied\tview fixed\tredis missing\tdrift\t")
	for _, d := range drifts {
		drift := "clean"
		if !d.Clean() {
			drift = "DRIFT (repaired)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\t%t\t%s\t\n", d.SKU, d.Gen, d.Pool, d.Granted, d.Sold, d.Returned,
			d.Direct, d.Unsynced, d.Allotment, d.Expected, d.Lost, d.Excess, d.GrantsApplied, d.ViewFixed, d.RedisMissing, drift)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "\npool, granted, sold, returned and direct are SQL's (direct: sold by SQL alone while Redis was down); allotment is Redis's;\n"+
		"expected is the allotment the grants and sales leave; lost: units Redis should hold but does not (not given back);\n"+
		"excess: allotment beyond expected (taken out). Reconcile repaired what it reports.")
	return err
}
