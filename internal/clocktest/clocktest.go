// Package clocktest checks that an [inventory.OrderManager] measures the
// TTL of its holds on its backend's clock, never on the client's, as the
// contract says: with client and servers on one machine (one clock) no
// other test can tell the two apart.
//
// [Run] sets the backend's clock [Skew] (ten days) behind the client's,
// then ten days ahead, far past any TTL it uses, so a TTL measured on the
// wrong clock cannot pass by luck, and moves the backend's clock on by two
// minutes while the client's moves by milliseconds. The ways to set a
// backend's clock are here too:
//
//   - MariaDB/MySQL ([MySQLAt]): the DSN parameter timestamp=, which
//     go-sql-driver/mysql sends as a session variable; it fixes NOW(),
//     UTC_TIMESTAMP() and CURRENT_TIMESTAMP for the session (not SYSDATE()).
//   - PostgreSQL ([PostgresAt]): a schema of the test's own, earlier on the
//     search_path than pg_catalog, with functions statement_timestamp(),
//     now(), clock_timestamp() and transaction_timestamp() that read the
//     session setting inventory_test.clock, which the DSN sets (the
//     library calls statement_timestamp(); the SQL keyword
//     CURRENT_TIMESTAMP cannot be overridden).
//   - Redis ([RedisAt]): a private redis-server whose wall clock a
//     preloaded library moves ([faulttest.StartSkewedRedis]); TIME, and so
//     every script, reads the moved clock.
//   - SQLite: an application function that overrides julianday(), in
//     integration/clock (the SQLite driver lives in the integration
//     module).
package clocktest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
)

// Manager is a manager the checks can run: both contracts.
type Manager interface {
	inventory.StockManager
	inventory.OrderManager
}

// At returns a manager over one subtest's backend whose clock reads at
// now: frozen there (a SQL session's clock) or running on from there (a
// skewed Redis). Managers of successive calls share the backend's data.
type At func(at time.Time) Manager

// Skew is how far the backend's clock is set from the client's.
const Skew = 10 * 24 * time.Hour

// Run runs the checks as subtests "behind" and "ahead" of t, the backend's
// clock Skew behind the client's and Skew ahead. setup prepares a backend
// (tables, a server) for one subtest and returns its At.
//
// In each: Reserve holds of 1 hour and 1 minute; Sweep releases nothing and
// Confirm of the 1-hour hold succeeds (on the client's clock they are ten
// days expired, or ten days from expiring); then the backend's clock moves
// on two minutes, and the 1-minute holds are released, one by the next
// Reduce of its SKU and one by Sweep, and Confirm reports ErrHoldReleased.
func Run(t *testing.T, setup func(t *testing.T) At) {
	for _, c := range []struct {
		name string
		skew time.Duration
	}{{"behind", -Skew}, {"ahead", Skew}} {
		t.Run(c.name, func(t *testing.T) { check(t, setup(t), c.skew) })
	}
}

func check(t *testing.T, at At, skew time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testenv.Prefix()
	a, b := p+"/a", p+"/b"
	long, shortA, shortB := p+"/long", p+"/short-a", p+"/short-b"
	clock := fmt.Sprintf("the backend's clock is %v %s the client's", Skew, map[bool]string{true: "ahead of", false: "behind"}[skew > 0])

	start := time.Now().Add(skew)
	m := at(start)
	require.NoError(t, m.Init(ctx, a, 10))
	require.NoError(t, m.Init(ctx, b, 10))
	require.NoError(t, m.Reserve(ctx, long, []inventory.Line{{SKU: a, Qty: 1}}, time.Hour))
	require.NoError(t, m.Reserve(ctx, shortA, []inventory.Line{{SKU: a, Qty: 2}}, time.Minute))
	require.NoError(t, m.Reserve(ctx, shortB, []inventory.Line{{SKU: b, Qty: 3}}, time.Minute))

	n, err := m.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "%s: Sweep released holds of 1 minute and 1 hour made a moment before on the backend's clock: their TTL was measured on the client's clock", clock)
	levels(t, ctx, m, a, 7, 3, clock+", before any TTL passed on it")
	levels(t, ctx, m, b, 7, 3, clock+", before any TTL passed on it")
	require.NoError(t, m.Confirm(ctx, long), "%s: Confirm of a 1-hour hold made a moment before on the backend's clock failed: its TTL was measured on the client's clock", clock)

	// The backend's clock moves two minutes on, the client's milliseconds.
	m = at(start.Add(2 * time.Minute))
	rem, err := m.Reduce(ctx, a, 9)
	require.NoError(t, err, "%s, and moved 2 minutes on: the 1-minute hold on %q must be released by this Reduce (its TTL passed on the backend's clock, not on the client's)", clock, a)
	require.Zero(t, rem)
	n, err = m.Sweep(ctx)
	require.NoError(t, err)
	// 1, or 2 where the Reduce released only the line on a, not the hold.
	require.True(t, n == 1 || n == 2, "%s, and moved 2 minutes on: Sweep released %d holds; it must release the 1-minute hold on %q (its TTL passed on the backend's clock, not on the client's)", clock, n, b)
	levels(t, ctx, m, b, 10, 0, clock+", after the short holds' TTL passed on it")
	for _, id := range []string{shortA, shortB} {
		require.ErrorIs(t, m.Confirm(ctx, id), inventory.ErrHoldReleased, "%s: Confirm of hold %q after its TTL passed on the backend's clock", clock, id)
	}
	levels(t, ctx, m, a, 0, 0, clock+": at the end")
}

func levels(t *testing.T, ctx context.Context, m Manager, sku string, available, held int64, when string) {
	t.Helper()
	got, err := m.Get(ctx, sku)
	require.NoError(t, err)
	h, err := m.Held(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, [2]int64{available, held}, [2]int64{got, h}, "%s: [available, held] of %q", when, sku)
}

// open opens a small pool, closed at the end of t.
func open(t testing.TB, driver, dsn, what string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open(driver, dsn)
	require.NoError(t, err, "open %s", what)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Missing(t, what, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	return db
}

// reads fails t unless query, through db, reads at (Unix µs), within a
// millisecond.
func reads(t testing.TB, db *sqlx.DB, what, query string, at time.Time) {
	t.Helper()
	var us int64
	require.NoError(t, db.Get(&us, query), "read %s", what)
	// Within a millisecond: PostgreSQL's EXTRACT(EPOCH ...) is a double.
	require.InDelta(t, at.UnixMicro(), us, 1000, "the session's clock was not set: %s reads %v, not %v", what, time.UnixMicro(us).UTC(), at.UTC())
}

// MySQLAt returns the MariaDB/MySQL test database's pool and a function
// that opens pools on it whose sessions' clock is frozen at a given time
// (the DSN parameter timestamp=). The pools close at the end of t.
func MySQLAt(t testing.TB) (*sqlx.DB, func(at time.Time) *sqlx.DB) {
	t.Helper()
	db := testenv.MySQL(t)
	dsn := testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return db, func(at time.Time) *sqlx.DB {
		ts := fmt.Sprintf("%d.%06d", at.Unix(), at.Nanosecond()/1000)
		c := open(t, "mysql", dsn+sep+"timestamp="+ts, "MariaDB/MySQL at "+at.UTC().Format(time.RFC3339Nano))
		reads(t, c, "UTC_TIMESTAMP(6) as Unix µs", `SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))`, at)
		return c
	}
}

// clockFuncs are the PostgreSQL clock functions PostgresAt overrides.
var clockFuncs = []string{"statement_timestamp", "now", "clock_timestamp", "transaction_timestamp"}

// PostgresAt returns the PostgreSQL test database's pool and a function
// that opens pools on it whose clock functions read a given time: a schema
// of t's own (dropped at its end) holds functions of the same names that
// return the session setting inventory_test.clock, and each pool's DSN puts
// that schema first on search_path (then the test pool's own search_path,
// then pg_catalog) and sets the clock. The pools close at the end of t.
func PostgresAt(t testing.TB) (*sqlx.DB, func(at time.Time) *sqlx.DB) {
	t.Helper()
	db := testenv.Postgres(t)
	schema := "clock_" + testenv.Prefix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA "` + schema + `" CASCADE`) })
	for _, f := range clockFuncs {
		_, err := db.ExecContext(ctx, `CREATE FUNCTION "`+schema+`".`+f+`() RETURNS timestamptz LANGUAGE sql STABLE
			AS $$ SELECT pg_catalog.current_setting('inventory_test.clock')::timestamptz $$`)
		require.NoError(t, err)
	}
	var path string // where the tables are: the pool's own search_path
	require.NoError(t, db.GetContext(ctx, &path, `SELECT pg_catalog.current_setting('search_path')`))
	dsn := testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres)
	return db, func(at time.Time) *sqlx.DB {
		params := map[string]string{
			// No spaces: pgx takes a URL's query as it is, + and all.
			"search_path":          `"` + schema + `",` + strings.ReplaceAll(path, " ", "") + `,pg_catalog`,
			"inventory_test.clock": at.UTC().Format(time.RFC3339Nano),
		}
		c := open(t, "pgx", withParams(dsn, params), "PostgreSQL at "+params["inventory_test.clock"])
		reads(t, c, "statement_timestamp() as Unix µs", `SELECT (EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT`, at)
		return c
	}
}

// withParams adds runtime parameters to a PostgreSQL DSN, a URL or
// key=value pairs.
func withParams(dsn string, params map[string]string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	for k, v := range params {
		dsn += " " + k + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
	}
	return dsn
}

// RedisAt returns a function that returns a client of a private Redis
// whose wall clock reads a given time: the first call starts the server
// (faulttest.StartSkewedRedis), later calls restart it on the same data
// with its clock moved. Each client closes at the end of t, and a call
// closes the previous one.
func RedisAt(t testing.TB) func(at time.Time) *redis.Client {
	t.Helper()
	var (
		srv  *faulttest.SkewedRedis
		prev *redis.Client
	)
	return func(at time.Time) *redis.Client {
		if prev != nil {
			prev.Close()
		}
		if offset := time.Until(at); srv == nil {
			srv = faulttest.StartSkewedRedis(t, offset)
		} else {
			srv.SetOffset(offset)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { c.Close() })
		prev = c
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		// It runs on from at: a restart takes well under a minute.
		require.True(t, !now.Before(at.Add(-time.Second)) && now.Before(at.Add(time.Minute)),
			"the Redis clock was not moved: TIME reads %v, not %v", now.UTC(), at.UTC())
		return c
	}
}
