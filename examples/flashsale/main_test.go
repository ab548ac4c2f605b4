// The tests are in package main because a command cannot be imported: they
// call run, the whole program, in process.
package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
)

// Under the race detector the buyers stay well inside its goroutine limit.
const buyers, stock = 1000, 100

func runJSON(t *testing.T, args ...string) []result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	// Each call's deadline is a minute (not the program's 10 s): under
	// -race on a loaded machine a redlock call over the embedded Redis has
	// passed 10 s (load 30) without anything being wrong. A call that
	// fails still fails its row, and the row the run.
	err := run(ctx, append(append([]string{"-timeout", "1m"}, args...), "-format", "json"), &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	assert.Empty(t, stderr.String(), "no progress on stderr unless asked for")
	var results []result
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &results), "stdout:\n%s", stdout.String())
	return results
}

// checkSale checks every row that ran: nothing oversold or lost, the whole
// stock sold, every request answered, and returns the rows by name.
func checkSale(t *testing.T, results []result, buyers int, stock int64) map[string]result {
	t.Helper()
	rows := map[string]result{}
	for _, r := range results {
		name := r.Strategy + "/" + r.Store
		rows[name] = r
		if r.Skipped != "" {
			continue
		}
		t.Logf("%-28s sold %d, %d sold out, %d contention, %d duplicate, %d errors, %d retries; %.0f req/s, p99 %.1fms",
			name, r.Sold, r.Insufficient, r.Contention, r.Duplicate, r.Errors, r.Retries, r.Throughput, r.P99MS)
		assert.Empty(t, r.Failure, name)
		assert.Zero(t, r.Oversold, "%s oversold", name)
		assert.Zero(t, r.Lost, "%s lost units", name)
		assert.Equal(t, stock, r.Sold, "%s sells the whole stock", name)
		assert.Zero(t, r.Left, "%s has stock left", name)
		assert.Equal(t, r.Initial-r.Left, r.Sold, "%s: initial - final == sold", name)
		assert.Zero(t, r.Errors, "%s: first error %s", name, r.FirstError)
		assert.EqualValues(t, buyers, r.Buyers, name)
		repeaters := (buyers + 5) / 10
		assert.EqualValues(t, buyers+repeaters, r.Requests, "%s answers every click", name)
		assert.Equal(t, r.Requests, r.Sold+r.Insufficient+r.Contention+r.Duplicate+r.Errors,
			"%s: every click either bought or was refused", name)
		assert.LessOrEqual(t, r.Duplicate, int64(repeaters), "%s: only repeat clicks can be duplicates", name)
		assert.Positive(t, r.Throughput, name)
		assert.GreaterOrEqual(t, r.P99MS, r.P50MS, name)
	}
	return rows
}

func TestEmbedded(t *testing.T) {
	t.Parallel()
	// 64 calls in flight: under -race on a loaded machine, 256 queued on
	// miniredis outlast the calls' -timeout, and tiered's circuit breaker
	// (rightly) takes a Redis that misses deadlines for a dead one.
	results := runJSON(t, "-buyers", strconv.Itoa(buyers), "-stock", strconv.Itoa(stock), "-concurrency", "64")
	rows := checkSale(t, results, buyers, stock)
	for name, r := range rows {
		if r.Skipped == "" {
			// 100 of 1000 buyers click twice and each buys with odds of
			// 1 in 10, so all of them missing has odds of about 1 in 40,000.
			assert.Positive(t, r.Duplicate, "%s: repeat buyers who had bought are told so", name)
		}
	}
	assert.Contains(t, rows["bare-script/redis"].Skipped, "-redis", "the ceiling measures a real Redis, and the report says how to run it")
	for _, name := range []string{
		"map/process", "luascript/redis",
		"optimistic/sqlite", "optimistic-single/sqlite", "rowlock/sqlite",
		"redislock/redis", "redlock/redis", "tiered/redis+sqlite",
	} {
		r, ok := rows[name]
		if assert.True(t, ok, "%s is in the report", name) {
			assert.Empty(t, r.Skipped, "%s runs with no server", name)
		}
	}
	assert.Contains(t, rows["zklock/redis"].Skipped, "-zk", "the report says how to run zklock")
	for _, name := range []string{"map/process", "luascript/redis", "redislock/redis", "redlock/redis", "tiered/redis+sqlite"} {
		assert.True(t, rows[name].Embedded, "%s ran in process, and says so", name)
	}
	assert.False(t, rows["rowlock/sqlite"].Embedded)
	assert.Equal(t, "embedded miniredis", rows["luascript/redis"].Where)
	assert.Equal(t, "embedded miniredis; SQLite temporary file", rows["tiered/redis+sqlite"].Where)
	checkTiered(t, rows["tiered/redis+sqlite"], false)
	assert.Len(t, rows, 10)
}

// checkTiered checks a tiered row's own figures: every unit sold by Redis
// or by SQL alone, SQL and Redis reconciled without a lost unit.
func checkTiered(t *testing.T, r result, killed bool) {
	t.Helper()
	name := r.Strategy + "/" + r.Store
	tr := r.Tiered
	if !assert.NotNil(t, tr, "%s reports who sold", name) {
		return
	}
	assert.Empty(t, r.Failure, name)
	assert.Zero(t, r.Oversold, name)
	assert.Equal(t, r.Initial-r.Left, tr.RedisSold+tr.FallbackSold, "%s: every unit taken was sold by Redis or by SQL alone", name)
	assert.Zero(t, tr.Lost, name)
	assert.Zero(t, tr.Excess, name)
	assert.Zero(t, tr.Pool, "%s: SQL's pool is sold out", name)
	if !killed {
		assert.Equal(t, r.Left, tr.Allotment, "%s: what is left is Redis's", name)
		assert.EqualValues(t, -1, tr.KilledAt, name)
		assert.True(t, tr.Clean, "%s: Reconcile found nothing after a sale without faults", name)
		assert.Zero(t, tr.FallbackSold, name)
		assert.Zero(t, tr.Fallbacks, name)
		return
	}
	assert.GreaterOrEqual(t, tr.KilledAt, r.Initial/5, "%s: killed at 20%% of the stock", name)
	assert.GreaterOrEqual(t, tr.RedisSold, tr.KilledAt, "%s: Redis sold before the kill", name)
	assert.Positive(t, tr.FallbackSold, "%s: SQL sold alone while Redis was down", name)
	assert.Positive(t, tr.Fallbacks, name)
}

// -kill-redis-at SIGKILLs the tiered row's private Redis mid-sale: SQL
// sells its pool alone meanwhile, and after the sale Redis restarts from
// its AOF, the journal is drained and Reconcile finds nothing lost.
func TestTieredKillRedis(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip("needs redis-server: run `make services`")
	}
	prefix := cleanPrefix(t, nil, []*sqlx.DB{testenv.MySQL(t)}, nil)
	results := runJSON(t, "-buyers", "600", "-stock", "300", "-concurrency", "32", "-prefix", prefix,
		"-mysql", testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL), "-strategies", "tiered/redis+mysql", "-kill-redis-at", "0.2")
	require.Len(t, results, 1)
	r := results[0]
	t.Logf("sold %d, left %d, errors %d (unknown %d); tiered %+v", r.Sold, r.Left, r.Errors, r.Unknown, *r.Tiered)
	assert.Contains(t, r.Where, "private redis-server")
	assert.False(t, r.Embedded)
	assert.Zero(t, r.Lost)
	assert.Zero(t, r.Duplicate, "no keys while Redis may be down")
	assert.LessOrEqual(t, r.Sold, r.Initial-r.Left, "buyers were told of no unit that was not taken")
	assert.LessOrEqual(t, r.Initial-r.Left-r.Sold, r.Unknown, "units taken unseen: only by calls cut without a verdict")
	checkTiered(t, r, true)
}

// The bare-script row has no idempotency keys: with stock for every click,
// each repeat click buys again, where luascript's keyed buyers are told
// ErrDuplicate; the table says it is a baseline, and the verdict gives its
// multiple of luascript's req/s. -strategies still knows it as ceiling.
func TestBareScript(t *testing.T) {
	t.Parallel()
	prefix := cleanPrefix(t, []redis.UniversalClient{testenv.Redis(t)}, nil, nil)
	args := []string{"-buyers", "200", "-stock", "1000", "-repeat", "1", "-strategies", "luascript,ceiling",
		"-prefix", prefix, "-redis", testenv.Get(testenv.EnvRedis, testenv.DefaultRedis)}
	rows := map[string]result{}
	for _, r := range runJSON(t, args...) {
		rows[r.Strategy+"/"+r.Store] = r
	}
	require.Len(t, rows, 2)
	c, l := rows["bare-script/redis"], rows["luascript/redis"]
	assert.Empty(t, c.Failure)
	assert.Contains(t, c.Where, "bare check-and-DECRBY")
	assert.False(t, c.Embedded)
	assert.EqualValues(t, 400, c.Sold, "no keys: both clicks of every buyer buy")
	assert.EqualValues(t, 200, c.Rebought)
	assert.Zero(t, c.Duplicate)
	assert.EqualValues(t, 600, c.Left)
	assert.Zero(t, c.Lost)
	assert.EqualValues(t, 200, l.Sold, "keyed: one purchase per buyer")
	assert.EqualValues(t, 200, l.Duplicate)
	assert.Zero(t, l.Rebought)

	var table bytes.Buffer
	require.NoError(t, run(context.Background(), append(args, "-stock", "50"), &table, io.Discard))
	out := table.String()
	t.Logf("table:\n%s", out)
	assert.Regexp(t, `(?m)^ +bare-script +redis +50 +0 +0 +350 +0 `, out, "the bare script's row: 50 sold, none oversold or left, 350 clicks sold out, no contention")
	assert.Contains(t, unwrap(out), "bare-script/redis is a baseline, not a strategy")
	assert.Regexp(t, `redis: luascript, \d+ req/s, sold exactly \(the only strategy on this store\); the bare script without keys did \d+\.\d\dx luascript's req/s`, unwrap(out))
}

// unwrap joins the lines the report wrapped (and every indented line to
// the one before it).
func unwrap(s string) string { return regexp.MustCompile(`\n +`).ReplaceAllString(s, " ") }

// Without -wide every line of the report fits 120 columns, and it ends
// with the verdicts; -wide adds the other columns.
func TestWidth(t *testing.T) {
	t.Parallel()
	args := []string{"-buyers", "300", "-stock", "20", "-strategies", "map,luascript,optimistic-single,rowlock,tiered,zklock"}
	var narrow, wide bytes.Buffer
	require.NoError(t, run(context.Background(), args, &narrow, io.Discard))
	t.Logf("narrow:\n%s", narrow.String())
	for _, line := range strings.Split(narrow.String(), "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 120, "%q", line)
	}
	assert.Regexp(t, `(?m)^ +strategy +store +sold +oversold +left +sold out +contention +elapsed +req/s +p50 +p99$`, narrow.String())
	lines := strings.Split(strings.TrimSpace(narrow.String()), "\n")
	assert.Regexp(t, `^  sqlite: (optimistic-single|rowlock), \d+ req/s, \d+\.\dx the next, (optimistic-single|rowlock) \(\d+ req/s\)$`, lines[len(lines)-1])

	require.NoError(t, run(context.Background(), append(args, "-wide"), &wide, io.Discard))
	assert.Regexp(t, `(?m)^ +strategy +store +sold +oversold +lost +left +sold out +contention +duplicate +error +retries +elapsed +req/s +p50 +p90 +p99 +max$`, wide.String())
}

// The verdict of a store is its fastest strategy that sold exactly: not a
// faster one that oversold, lost a unit, left one unsold, or failed, nor a
// baseline; "by how much" is against the next that sold exactly.
func TestVerdict(t *testing.T) {
	cfg := &config{qty: 1}
	row := func(strategy, store string, rps float64, change func(*result)) result {
		r := result{Strategy: strategy, Store: store, Ran: true, Buyers: 500, Initial: 100, Sold: 100, Throughput: rps}
		if change != nil {
			change(&r)
		}
		return r
	}
	results := []result{
		row("map", "process", 90000, nil),
		row("bare-script", "redis", 8000, nil),
		row("luascript", "redis", 4000, nil),
		row("redislock", "redis", 9000, func(r *result) { r.Oversold, r.Sold = 3, 103 }),
		row("redlock", "redis", 7000, func(r *result) { r.Lost = 1 }),
		row("zklock", "redis", 6000, func(r *result) { r.Sold = 99 }),
		row("tiered", "redis+sqlite", 5000, func(r *result) { r.Failure = "10 requests failed without a verdict" }),
		row("optimistic", "sqlite", 1000, nil),
		row("rowlock", "sqlite", 3000, func(r *result) { r.Embedded = true }),
		row("sqllock", "mysql", 700, nil),
		{Strategy: "zklock", Store: "mysql", Skipped: "no ZooKeeper"},
	}
	var out bytes.Buffer
	require.NoError(t, writeVerdicts(&out, cfg, results))
	assert.Equal(t, "\nverdict: per store, the fastest strategy that sold exactly (no unit oversold or lost, none left unsold to a buyer):\n"+
		"  redis: luascript, 4000 req/s, the only one that sold exactly; the bare script without keys did 2.00x luascript's req/s\n"+
		"  redis+sqlite: none of 1 sold exactly\n"+
		"  sqlite: rowlock, 3000 req/s, 3.0x the next, optimistic (1000 req/s); embedded: not a real server's speed\n"+
		"  mysql: sqllock, 700 req/s, sold exactly (the only strategy on this store)\n", out.String())
}

// cleanPrefix returns a -prefix unique to t, and removes at the end of t
// everything written under it on the shared servers: Redis keys on each of
// clients, the SQL tables on each of dbs, and the
// ZooKeeper nodes on zkConn.
func cleanPrefix(t *testing.T, clients []redis.UniversalClient, dbs []*sqlx.DB, zkConn *zk.Conn) string {
	p := testenv.Prefix()
	for _, c := range clients {
		t.Cleanup(func() { testenv.DeleteKeys(t, c, p+"*") })
	}
	for _, db := range dbs {
		sqltest.Drop(t, db, p+"_stock", p+"_ledger", p+"_holds", p+"_orders", p+"_tiered_stock", p+"_tiered_grants", p+"_tiered_synced", p+"_tiered_keys")
	}
	if zkConn != nil {
		t.Cleanup(func() { deleteZnodes(t, zkConn, "/"+p) })
	}
	return p
}

// deleteZnodes deletes path and every node under it.
func deleteZnodes(t *testing.T, c *zk.Conn, path string) {
	children, _, err := c.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	require.NoError(t, err)
	for _, ch := range children {
		deleteZnodes(t, c, path+"/"+ch)
	}
	if err := c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("deleting %s: %v", path, err)
	}
}

func TestRealServers(t *testing.T) {
	t.Parallel()
	// Each call skips the test, or fails it with CI=true, when its server
	// does not answer.
	rdb := testenv.Redis(t)
	clients := []redis.UniversalClient{rdb}
	for _, c := range testenv.RedlockClients(t) {
		clients = append(clients, c)
	}
	prefix := cleanPrefix(t, clients, []*sqlx.DB{testenv.MySQL(t), testenv.Postgres(t)}, testenv.ZooKeeper(t))

	const buyers, stock = 500, 50
	results := runJSON(t,
		"-buyers", strconv.Itoa(buyers), "-stock", strconv.Itoa(stock), "-prefix", prefix,
		"-redis", testenv.Get(testenv.EnvRedis, testenv.DefaultRedis),
		"-redlock", testenv.Get(testenv.EnvRedlock, testenv.DefaultRedlock),
		"-mysql", testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL),
		"-postgres", testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres),
		"-zk", testenv.Get(testenv.EnvZooKeeper, testenv.DefaultZooKeeper),
		"-lock-stores", "redis,postgres", "-metrics",
	)
	rows := checkSale(t, results, buyers, stock)
	for _, s := range []string{"optimistic", "optimistic-single", "rowlock"} {
		for _, store := range []string{"sqlite", "mysql", "postgres"} {
			assert.Contains(t, rows, s+"/"+store)
		}
	}
	assert.Contains(t, rows, "sqllock/mysql")
	assert.Contains(t, rows, "sqllock/postgres")
	for _, s := range []string{"redislock", "redlock", "zklock"} {
		for _, store := range []string{"redis", "postgres"} {
			assert.Contains(t, rows, s+"/"+store)
		}
	}
	for name, r := range rows {
		assert.Empty(t, r.Skipped, "%s runs when every server is given", name)
		assert.Equal(t, r.Strategy == "map", r.Embedded, "%s ran on a real server", name)
		checkMetrics(t, name, r, 1)
	}
	for _, store := range []string{"sqlite", "mysql", "postgres"} {
		checkTiered(t, rows["tiered/redis+"+store], false)
	}
	assert.Len(t, rows, 3+3+9+2+6)
}

// checkMetrics checks that what the otelstock decorator counted in row r
// agrees with the sale's own counts, one equation per counter. The program
// checks the same (a disagreement fails the row); this checks it
// independently of that code.
func checkMetrics(t *testing.T, name string, r result, qty int64) {
	t.Helper()
	if r.Strategy == "map" && r.Metrics == nil {
		return
	}
	m := r.Metrics
	if !assert.NotNil(t, m, "%s: -metrics gives the decorator's counters", name) {
		return
	}
	assert.Equal(t, r.Requests+r.Retries, m.Calls, "%s: one Reduce per request, and one per retry", name)
	assert.EqualValues(t, m.Calls, m.Durations, "%s: one duration per call", name)
	assert.Equal(t, r.Sold, m.Units, "%s: units the decorator saw taken", name)
	assert.Equal(t, r.Sold/qty, m.OK, "%s: calls that bought", name)
	assert.Equal(t, r.Insufficient, m.Insufficient, "%s: sold out", name)
	assert.Equal(t, r.Duplicate, m.Duplicate, "%s: duplicates", name)
	assert.Equal(t, r.Retries+r.Contention+r.Errors, m.Contention+m.Errors+m.NotFound+m.Invalid, "%s: failed calls", name)
	assert.LessOrEqual(t, m.P50MS, m.P99MS, name)
}

// -metrics wraps every strategy in otelstock; its counters, printed beside
// the table, agree with the sale's.
func TestMetrics(t *testing.T) {
	t.Parallel()
	results := runJSON(t, "-buyers", "400", "-stock", "40", "-qty", "2", "-metrics")
	for _, r := range results {
		if r.Ran {
			checkMetrics(t, r.Strategy+"/"+r.Store, r, 2)
			assert.Empty(t, r.Failure)
		}
	}
	var table bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-buyers", "100", "-stock", "10", "-strategies", "map,rowlock", "-metrics"}, &table, io.Discard))
	out := table.String()
	t.Logf("table:\n%s", out)
	assert.Contains(t, out, "otelstock's counters")
	assert.Regexp(t, `(?m)^ +rowlock +sqlite +110 +10 +\d+ +\d+ +0 +0 +10 .* yes\s*$`, out, "rowlock's row: 110 calls, 10 ok, 10 units, agrees")

	// The check catches counters that disagree.
	r := results[0]
	bad := *r.Metrics
	bad.OK++
	bad.Calls++
	assert.Contains(t, bad.check(r, 0, 2), "calls (requests + retries)")
}

func TestRealRedisCluster(t *testing.T) {
	t.Parallel()
	prefix := cleanPrefix(t, []redis.UniversalClient{testenv.RedisCluster(t)}, nil, nil)
	const buyers, stock = 300, 30
	results := runJSON(t, "-buyers", strconv.Itoa(buyers), "-stock", strconv.Itoa(stock), "-prefix", prefix,
		"-redis", testenv.Get(testenv.EnvRedisCluster, testenv.DefaultRedisCluster),
		"-strategies", "luascript,redislock/redis")
	rows := checkSale(t, results, buyers, stock)
	assert.Len(t, rows, 2)
}

func TestFormats(t *testing.T) {
	t.Parallel()
	args := []string{"-buyers", "300", "-stock", "20", "-qty", "3", "-strategies", "map,luascript,zklock"}
	ctx := context.Background()

	var table, stderr bytes.Buffer
	require.NoError(t, run(ctx, append(args, "-progress"), &table, &stderr))
	out := table.String()
	t.Logf("table:\n%s", out)
	for _, want := range []string{"300 buyers (30 click twice) for 20 units, 3 per buyer", "strategy", "oversold", "p99", "map", "luascript", "zklock/redis did not run"} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, stderr.String(), "luascript/redis", "-progress writes to stderr")
	assert.Contains(t, stderr.String(), "330/330 requests")
	assert.Contains(t, stderr.String(), "sold 18/20", "the progress line shows the units sold")
	assert.Regexp(t, `[0-9]+ req/s, (ETA|done in) `, stderr.String(), "and the rate, and the time left or taken")

	var csvOut bytes.Buffer
	require.NoError(t, run(ctx, append(args, "-format", "csv"), &csvOut, io.Discard))
	records, err := csv.NewReader(&csvOut).ReadAll()
	require.NoError(t, err)
	require.Len(t, records, 4, "a header and three rows")
	col := map[string]int{}
	for i, name := range records[0] {
		col[name] = i
	}
	for _, rec := range records[1:] {
		name := rec[col["strategy"]] + "/" + rec[col["store"]]
		if rec[col["skipped"]] != "" {
			assert.Equal(t, "zklock/redis", name)
			continue
		}
		// 20 units, 3 per buyer: 6 buyers get 18 units, 2 are left.
		assert.Equal(t, "18", rec[col["sold"]], name)
		assert.Equal(t, "2", rec[col["left"]], name)
		assert.Equal(t, "0", rec[col["oversold"]], name)
		assert.Equal(t, "0", rec[col["lost"]], name)
	}
}

// The main job does not build the plotting library: the chart is a
// command of its own (issue 31: gonum/plot was most of the cold build).
func TestNoPlotLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "github.com/stockkit/inventory/luascript", "go list lists the dependencies")
	assert.NotContains(t, string(out), "gonum.org/", "flashsale's dependencies")
}

func TestBadFlags(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"-buyers", "0"}, {"-qty", "0"}, {"-repeat", "1.5"}, {"-format", "xml"},
		{"-redlock", "127.0.0.1:1,127.0.0.1:2"}, {"-lock-stores", "oracle"}, {"-nope"}, {"stray"},
		{"-prefix", "a;drop"}, {"-prefix", ""}, {"-prefix", "Sale"},
		{"-carts", "-skus", "0"}, {"-carts", "-abandon", "0.7", "-direct", "0.5"}, {"-carts", "-hold-ttl", "0s"},
		{"-carts", "-reap", "0s"}, {"-carts", "-metrics"}, {"-backoff", "0s"},
	} {
		var stderr bytes.Buffer
		err := run(ctx, args, io.Discard, &stderr)
		require.ErrorIs(t, err, errUsage, "%q", args)
		assert.NotEmpty(t, stderr.String(), "%q says what is wrong", args)
	}
	err := run(ctx, []string{"-strategies", "nothing"}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "selects nothing")
	var stderr bytes.Buffer
	err = run(ctx, []string{"-strategies", "map", "-chart", "x.png"}, io.Discard, &stderr)
	require.ErrorIs(t, err, errUsage)
	assert.Contains(t, stderr.String(), "go run ./examples/flashsale -format json | go run ./examples/flashsale/chart -o x.png")
	require.ErrorIs(t, run(ctx, []string{"-h"}, io.Discard, io.Discard), flag.ErrHelp)
}

func TestUnreachableServerFails(t *testing.T) {
	ctx := context.Background()
	var stdout bytes.Buffer
	err := run(ctx, []string{"-strategies", "map,luascript", "-redis", "127.0.0.1:1", "-timeout", "1s"}, &stdout, io.Discard)
	require.Error(t, err, "a strategy that cannot run is a failure")
	assert.Contains(t, err.Error(), "luascript/redis")
	assert.Contains(t, stdout.String(), "luascript/redis FAILED", "the table still shows what ran")
	assert.Contains(t, stdout.String(), "map")
}

// The checks catch a strategy that oversells or loses units.
func TestDetectsOversellAndLoss(t *testing.T) {
	cfg, err := parseFlags([]string{"-buyers", "400", "-stock", "10", "-concurrency", "64"}, io.Discard)
	require.NoError(t, err)
	env := newBackends(cfg)
	defer env.close()
	ctx := context.Background()

	racy := &racyManager{Memory: inventorytest.NewMemory(0)}
	r := runSale(ctx, cfg, env, target{strategy: "racy", store: "test", open: opener(racy)}, io.Discard)
	assert.Positive(t, r.Oversold, "a read-check-write race oversells")
	assert.Contains(t, r.Failure, "OVERSOLD")

	leaky := &leakyManager{Memory: inventorytest.NewMemory(0)}
	r = runSale(ctx, cfg, env, target{strategy: "leaky", store: "test", open: opener(leaky)}, io.Discard)
	// 10 units: sales 2, 4 and 6 take two each, so 7 sales empty the stock.
	assert.Zero(t, r.Oversold)
	assert.EqualValues(t, 7, r.Sold)
	assert.EqualValues(t, 3, r.Lost, "three units vanished without a sale")
	assert.Contains(t, r.Failure, "LOST")
}

// A row with errors, requests that failed without a verdict after their
// retries, is a failure that names them: go run ./examples/flashsale
// -carts once exited 0 with 24 errors in its redlock row.
func TestErrorsFailTheRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := parseFlags([]string{"-buyers", "100", "-stock", "10", "-retries", "2", "-backoff", "1ms"}, io.Discard)
	require.NoError(t, err)
	env := newBackends(cfg)
	defer env.close()
	r := runSale(ctx, cfg, env, target{strategy: "failing", store: "test", open: opener(failingManager{inventorytest.NewMemory(0)})}, io.Discard)
	assert.True(t, r.Ran)
	assert.Positive(t, r.Errors)
	assert.Zero(t, r.Oversold)
	assert.Zero(t, r.Lost)
	assert.Contains(t, r.Failure, fmt.Sprintf("%d requests failed without a verdict, first: %s", r.Errors, r.FirstError))
	assert.Contains(t, r.FirstError, "connection reset")
	assert.Equal(t, 2*r.Errors, r.Retries, "each failed request was made -retries 2 times more, through package retry")

	cfg, err = parseFlags(append(slices.Clone(cartArgs), "-retries", "2", "-backoff", "1ms"), io.Discard)
	require.NoError(t, err)
	env = newBackends(cfg)
	defer env.close()
	r = runSale(ctx, cfg, env, target{strategy: "failing", store: "test", open: opener(failingManager{inventorytest.NewMemory(0)})}, io.Discard)
	assert.True(t, r.Ran)
	assert.Positive(t, r.Errors)
	assert.Contains(t, r.Failure, "requests failed without a verdict")

	// And the run fails, naming the row: run joins every row's failure.
	var stdout bytes.Buffer
	failed := []result{r}
	require.NoError(t, write(&stdout, cfg, env, failed))
	assert.Contains(t, stdout.String(), "failing/test FAILED: ")
}

// failingManager fails, without a verdict, every call of the buyers and
// carts whose key or id ends in 7, as a strategy with a broken path does.
type failingManager struct{ *inventorytest.Memory }

var errReset = errors.New("read tcp 127.0.0.1:6379: connection reset by peer")

func (m failingManager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if strings.HasSuffix(driver.Apply(opts).Key, "7") {
		return 0, errReset
	}
	return m.Memory.Reduce(ctx, sku, qty, opts...)
}

func (m failingManager) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	if strings.HasSuffix(driver.Apply(opts).Key, "7") {
		return errReset
	}
	return m.Memory.ReduceLines(ctx, lines, opts...)
}

func (m failingManager) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if strings.HasSuffix(id, "7") {
		return errReset
	}
	return m.Memory.Reserve(ctx, id, lines, ttl)
}

// A sale that outlives -sale-timeout is stopped and reported as a failure.
func TestSaleTimeout(t *testing.T) {
	cfg, err := parseFlags([]string{"-buyers", "50", "-sale-timeout", "200ms"}, io.Discard)
	require.NoError(t, err)
	env := newBackends(cfg)
	defer env.close()
	stuck := stuckManager{inventorytest.NewMemory(0)}
	r := runSale(context.Background(), cfg, env, target{strategy: "stuck", store: "test", open: opener(stuck)}, io.Discard)
	assert.Contains(t, r.Failure, "did not finish within -sale-timeout 200ms")
	assert.Zero(t, r.Sold)
}

// stuckManager's Reduce waits for its ctx to end.
type stuckManager struct{ *inventorytest.Memory }

func (stuckManager) Reduce(ctx context.Context, _ string, _ int64, _ ...inventory.Option) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func opener(m inventory.StockManager) func(context.Context) (inventory.StockManager, error) {
	return func(context.Context) (inventory.StockManager, error) { return m, nil }
}

// racyManager reads, pauses, then writes: the classic oversell.
type racyManager struct{ *inventorytest.Memory }

func (m *racyManager) Reduce(ctx context.Context, sku string, qty int64, _ ...inventory.Option) (int64, error) {
	cur, err := m.Get(ctx, sku)
	if err != nil {
		return 0, err
	}
	if cur < qty {
		return cur, fmt.Errorf("%w: racy", inventory.ErrInsufficientStock)
	}
	time.Sleep(time.Millisecond)
	return cur - qty, m.Init(ctx, sku, cur-qty)
}

// leakyManager takes an extra unit on every second sale, while stock lasts.
type leakyManager struct {
	*inventorytest.Memory
	mu    sync.Mutex
	calls int
}

func (m *leakyManager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rem, err := m.Memory.Reduce(ctx, sku, qty, opts...)
	if err != nil {
		return rem, err
	}
	if m.calls++; m.calls%2 == 0 && rem > 0 {
		return m.Memory.Reduce(ctx, sku, 1)
	}
	return rem, nil
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The JSON has the CSV's names (left, not final), and a strategy that did
// not run has no measures in either, rather than zeros.
func TestJSONAndCSVAgree(t *testing.T) {
	t.Parallel()
	args := []string{"-buyers", "50", "-stock", "100", "-strategies", "map,zklock"}
	var js, cs bytes.Buffer
	require.NoError(t, run(context.Background(), append(args, "-format", "json"), &js, io.Discard))
	require.NoError(t, run(context.Background(), append(args, "-format", "csv"), &cs, io.Discard))

	var rows []map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &rows), js.String())
	records, err := csv.NewReader(&cs).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Len(t, records, 3)
	header := records[0]

	ran, skipped := rows[0], rows[1]
	require.Equal(t, "map", ran["strategy"])
	require.Equal(t, "zklock", skipped["strategy"])
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	assert.ElementsMatch(t, header, keys(ran), "a row that ran has every CSV column, by the same names")
	assert.EqualValues(t, 50, ran["left"], "50 buyers of 100 units leave 50")
	assert.Equal(t, true, ran["ran"])

	assert.Equal(t, false, skipped["ran"])
	assert.NotEmpty(t, skipped["skipped"])
	assert.ElementsMatch(t, []string{"strategy", "store", "ran", "skipped", "failure"}, keys(skipped),
		"a row that did not run has no measures")

	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	assert.Equal(t, "true", records[1][col["ran"]])
	assert.Equal(t, "50", records[1][col["left"]])
	assert.Equal(t, "false", records[2][col["ran"]])
	for _, c := range []string{"left", "sold", "oversold", "lost", "requests", "p99_ms"} {
		assert.Empty(t, records[2][col[c]], "a row that did not run has no %s", c)
	}
}

// -h shows the boolean flags as booleans: a backquoted word in a usage
// would make the flag package print it as an argument.
func TestHelpShowsBooleans(t *testing.T) {
	var stderr bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h"}, io.Discard, &stderr), flag.ErrHelp)
	help := stderr.String()
	for _, name := range []string{"services", "progress"} {
		assert.Regexp(t, `(?m)^  -`+name+`\n`, help, "-%s is shown without an argument", name)
	}
}

// The sale's Redis clients honour each call's deadline while the server
// hangs (ContextTimeoutEnabled), and Redlock nodes never resend a command
// (MaxRetries -1).
func TestRedisClients(t *testing.T) {
	cfg, err := parseFlags([]string{"-redis", faulttest.HungServer(t)}, io.Discard)
	require.NoError(t, err)
	env := newBackends(cfg)
	defer env.close()
	_, err = faulttest.CheckLate(t, "connecting to a hung Redis", 200*time.Millisecond, func(ctx context.Context) error {
		_, err := env.redis(ctx)
		return err
	})
	require.Error(t, err)

	nodes, err := env.redlock(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes, 3)
	for _, n := range nodes {
		c, ok := n.(*redis.Client)
		require.True(t, ok)
		assert.Zero(t, c.Options().MaxRetries, "a Redlock node does not resend")
		assert.True(t, c.Options().ContextTimeoutEnabled)
	}
}

// The cart sale's arguments in the tests: small, holds that expire soon.
var cartArgs = []string{"-carts", "-buyers", "300", "-stock", "15", "-skus", "4", "-qty", "2",
	"-abandon", "0.25", "-direct", "0.25", "-hold-ttl", "300ms", "-reap", "25ms"}

// checkCarts checks every cart row that ran, independently of the
// program's own check: per SKU initial - available == sold once the holds
// have expired (no returns, held 0), nothing oversold, units came back.
func checkCarts(t *testing.T, results []result) map[string]result {
	t.Helper()
	rows := map[string]result{}
	for _, r := range results {
		name := r.Strategy + "/" + r.Store
		rows[name] = r
		if r.Skipped != "" {
			continue
		}
		c := r.Carts
		if !assert.NotNil(t, c, "%s: -carts gives the cart figures", name) {
			continue
		}
		t.Logf("%-28s sold %d, held %d, expired %d (%d abandoned, %d late), left %d; %d sold out, %d contention, %d errors, %d retries; released in %.0fms",
			name, r.Sold, c.Held, c.Expired, c.Abandoned, c.Late, r.Left, r.Insufficient, r.Contention, r.Errors, r.Retries, c.ReleaseMS)
		assert.Empty(t, r.Failure, name)
		assert.Equal(t, "ok", c.Check, name)
		assert.Zero(t, r.Oversold, name)
		assert.Zero(t, r.Lost, name)
		assert.Zero(t, c.HeldAfter, "%s: every hold expired", name)
		assert.Equal(t, 4, c.SKUs, name)
		assert.EqualValues(t, 4*15, r.Initial, name)
		var sold, left int64
		if assert.Len(t, c.PerSKU, 4, name) {
			for _, s := range c.PerSKU {
				assert.Zero(t, s.Held, "%s: %s", name, s.SKU)
				assert.GreaterOrEqual(t, s.Available, int64(0), "%s: %s", name, s.SKU)
				assert.Equal(t, s.Initial-s.Available, s.Sold-s.Returned+s.Held, "%s: %s: initial - available == sold - returned + held", name, s.SKU)
				sold, left = sold+s.Sold, left+s.Available
			}
		}
		assert.Equal(t, sold, r.Sold, name)
		assert.Equal(t, left, r.Left, name)
		assert.LessOrEqual(t, r.Sold+c.Held, r.Initial, "%s: sold and held fit in the stock", name)
		assert.Positive(t, c.Abandoned, "%s: some abandoned carts held units", name)
		assert.GreaterOrEqual(t, c.Expired, c.Abandoned, "%s: each abandoned hold's units expired", name)
		assert.Positive(t, r.Insufficient, "%s: carts outnumber the stock", name)
		switch r.Strategy {
		case "redislock", "redlock", "zklock", "sqllock":
			// Under a loaded -race run, lockmgr answers some Confirms
			// ErrNotFound ("its Reserve has not finished"): reported to
			// the lead. The stock is still checked above.
			if r.Errors > 0 {
				t.Logf("%s: %d errors; first: %s", name, r.Errors, r.FirstError)
			}
		default:
			assert.Zero(t, r.Errors, "%s: first error %s", name, r.FirstError)
		}
		// One request per cart, and a Confirm for each of the 150 payers
		// who got a hold.
		assert.GreaterOrEqual(t, r.Requests, int64(300), name)
		assert.LessOrEqual(t, r.Requests, int64(450), name)
	}
	return rows
}

// -carts on the embedded defaults: miniredis runs the order scripts (its
// TIME answers the wall clock), so the Redis rows run too.
//
// The cart tests run alone (not parallel): beside the other sales they
// would go past MariaDB's connection limit, and the lock strategies'
// calls past their deadlines.
func TestCartsEmbedded(t *testing.T) {
	// 64 calls in flight, as TestEmbedded: under -race on a loaded machine
	// (two test runs at once, load average 10-12), 256 queued on miniredis
	// missed deadlines, tiered's breaker took it for a dead Redis, and the
	// row's carts (orders need Redis) ended unknown.
	rows := checkCarts(t, runJSON(t, append(slices.Clone(cartArgs), "-concurrency", "64")...))
	for _, name := range []string{"map/process", "luascript/redis", "optimistic/sqlite", "optimistic-single/sqlite",
		"rowlock/sqlite", "redislock/redis", "redlock/redis", "tiered/redis+sqlite"} {
		if r, ok := rows[name]; assert.True(t, ok, name) {
			assert.Empty(t, r.Skipped, "%s runs with no server", name)
			assert.True(t, r.Ran, name)
		}
	}
	assert.Contains(t, rows["zklock/redis"].Skipped, "-zk")
	assert.Len(t, rows, 9)
}

func TestCartsRealServers(t *testing.T) {
	rdb := testenv.Redis(t)
	clients := []redis.UniversalClient{rdb}
	for _, c := range testenv.RedlockClients(t) {
		clients = append(clients, c)
	}
	prefix := cleanPrefix(t, clients, []*sqlx.DB{testenv.MySQL(t), testenv.Postgres(t)}, testenv.ZooKeeper(t))
	rows := checkCarts(t, runJSON(t, append(cartArgs, "-prefix", prefix,
		"-redis", testenv.Get(testenv.EnvRedis, testenv.DefaultRedis),
		"-redlock", testenv.Get(testenv.EnvRedlock, testenv.DefaultRedlock),
		"-mysql", testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL),
		"-postgres", testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres),
		"-zk", testenv.Get(testenv.EnvZooKeeper, testenv.DefaultZooKeeper),
		"-lock-stores", "redis,postgres")...))
	for name, r := range rows {
		assert.Empty(t, r.Skipped, "%s runs when every server is given", name)
		assert.Equal(t, r.Strategy == "map", r.Embedded, "%s ran on a real server", name)
	}
	assert.Len(t, rows, 2+9+2+6+3)
	// Nothing of the sale is left on the servers but the prefix's tables.
	n, err := rdb.Keys(context.Background(), prefix+"*").Result()
	require.NoError(t, err)
	assert.Empty(t, n, "the sale deletes its Redis keys")
}

// The check fails a strategy whose holds never come back, and one that
// takes a cart in part.
func TestCartsDetectBrokenOrders(t *testing.T) {
	t.Parallel()
	cfg, err := parseFlags(append(slices.Clone(cartArgs), "-hold-ttl", "50ms", "-reap", "10ms"), io.Discard)
	require.NoError(t, err)
	env := newBackends(cfg)
	defer env.close()
	ctx := context.Background()

	r := runSale(ctx, cfg, env, target{strategy: "sticky", store: "test", open: opener(stickyHolds{inventorytest.NewMemory(0)})}, io.Discard)
	assert.Equal(t, "FAIL", r.Carts.Check)
	assert.Contains(t, r.Failure, "still held")
	assert.Positive(t, r.Carts.HeldAfter)

	r = runSale(ctx, cfg, env, target{strategy: "partial", store: "test", open: opener(partialCarts{inventorytest.NewMemory(0)})}, io.Discard)
	assert.Equal(t, "FAIL", r.Carts.Check)
	assert.Contains(t, r.Failure, "but sold")
	assert.Positive(t, r.Lost)

	r = runSale(ctx, cfg, env, target{strategy: "plain", store: "test", open: opener(plainManager{inventorytest.NewMemory(0)})}, io.Discard)
	assert.False(t, r.Ran)
	assert.Contains(t, r.Skipped, "OrderManager")
}

// stickyHolds' holds last a month whatever the TTL asked.
type stickyHolds struct{ *inventorytest.Memory }

func (m stickyHolds) Reserve(ctx context.Context, id string, lines []inventory.Line, _ time.Duration) error {
	return m.Memory.Reserve(ctx, id, lines, inventory.MaxHoldTTL)
}

// partialCarts' ReduceLines takes the first line only.
type partialCarts struct{ *inventorytest.Memory }

func (m partialCarts) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.Memory.ReduceLines(ctx, lines[:1], opts...)
}

// plainManager is a StockManager without the order calls: only the
// interface's methods are promoted.
type plainManager struct{ inventory.StockManager }

// The cart table has the expired column and the check, and with -wide the
// held and lost columns too; it ends with the verdicts.
func TestCartsTableAndCSV(t *testing.T) {
	t.Parallel()
	args := append(slices.Clone(cartArgs), "-strategies", "map,rowlock,zklock")
	var table bytes.Buffer
	require.NoError(t, run(context.Background(), args, &table, io.Discard))
	out := table.String()
	t.Logf("table:\n%s", out)
	for _, want := range []string{"cart sale: 300 carts of 1-4 lines over 4 SKUs of 15 units", "expired", "check", "late", "zklock/redis did not run"} {
		assert.Contains(t, out, want)
	}
	for _, line := range strings.Split(out, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 120, "%q", line)
	}
	assert.Regexp(t, `(?m)^ +rowlock +sqlite +\d+ +\d+ +\d+ +0 +ok `, out, "sold, expired, left, oversold 0, check ok")
	assert.Regexp(t, `(?m)^  sqlite: rowlock, \d+ req/s, sold exactly \(the only strategy on this store\)$`, out)

	table.Reset()
	require.NoError(t, run(context.Background(), append(args, "-wide"), &table, io.Discard))
	assert.Regexp(t, `(?m)^ +rowlock +sqlite +\d+ +\d+ +\d+ +\d+ +0 +0 +ok `, table.String(), "sold, held, expired, left, oversold 0, lost 0, check ok")

	var cs bytes.Buffer
	require.NoError(t, run(context.Background(), append(args, "-format", "csv"), &cs, io.Discard))
	records, err := csv.NewReader(&cs).ReadAll()
	require.NoError(t, err)
	require.Len(t, records, 4)
	col := map[string]int{}
	for i, name := range records[0] {
		col[name] = i
	}
	for _, c := range cartColumns {
		assert.Contains(t, col, c)
	}
	assert.Equal(t, "ok", records[2][col["check"]])
	assert.Equal(t, "0", records[2][col["held_after"]])
	assert.Empty(t, records[3][col["check"]], "zklock did not run")
}
