package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/tiered"
	"github.com/stockkit/inventory/zklock"
)

// history answers GET /history/{sku} with the query q.
func (c client) history(sku, q string) (int, response) {
	c.t.Helper()
	code, _, r := c.do("GET", "/history/"+url.PathEscape(sku)+q, "")
	return code, r
}

// testHistory sells, holds and pays sku, initialised to 5 and never
// moved since, through the API of c, a service whose strategy keeps a
// ledger, and reads sku's history back, whole and a page at a time.
func testHistory(t *testing.T, c client, sku string) {
	for _, buyer := range []string{"ann", "bob", "ann"} { // ann's second buy is a duplicate: no entry
		code, r := c.buy(sku, buyer, 1)
		require.Equal(t, http.StatusOK, code, r.Message)
	}
	order := sku + "-order"
	code, r := c.post("/reserve", map[string]any{"order": order, "lines": lines{{"sku": sku, "qty": 2}}})
	require.Equal(t, http.StatusOK, code, r.Message)
	code, r = c.post("/confirm", map[string]any{"order": order})
	require.Equal(t, http.StatusOK, code, r.Message)

	code, r = c.history(sku, "")
	require.Equal(t, http.StatusOK, code, r.Message)
	assert.Equal(t, "ok", r.Status)
	assert.Equal(t, sku, r.SKU)
	var got []string
	for _, e := range r.Entries {
		got = append(got, fmt.Sprintf("%s %d: %d available, %d held, %d sold, key %q, hold %q",
			e.Kind, e.Units, e.Available, e.Held, e.Sold, e.Key, e.Hold))
		assert.False(t, e.Time.IsZero())
	}
	require.Equal(t, []string{
		`init 5: 5 available, 0 held, 0 sold, key "", hold ""`,
		`reduce 1: 4 available, 0 held, 1 sold, key "ann", hold ""`,
		`reduce 1: 3 available, 0 held, 2 sold, key "bob", hold ""`,
		`reserve 2: 1 available, 2 held, 2 sold, key "", hold "` + order + `"`,
		`confirm 2: 1 available, 0 held, 4 sold, key "", hold "` + order + `"`,
	}, got)
	require.NotNil(t, r.Next)
	assert.Equal(t, r.Entries[len(r.Entries)-1].Pos, *r.Next)
	all := r.Entries

	// A page at a time, from next to next.
	var paged []historyEntry
	after := int64(0)
	for range 10 {
		code, r = c.history(sku, fmt.Sprintf("?after=%d&limit=2", after))
		require.Equal(t, http.StatusOK, code, r.Message)
		require.LessOrEqual(t, len(r.Entries), 2)
		paged = append(paged, r.Entries...)
		after = *r.Next
		if len(r.Entries) < 2 {
			break
		}
	}
	require.Equal(t, all, paged)
	code, r = c.history(sku, fmt.Sprintf("?after=%d", after))
	require.Equal(t, http.StatusOK, code, r.Message)
	assert.Empty(t, r.Entries, "nothing past the last")
	assert.Equal(t, after, *r.Next, "next stays where it was")

	code, r = c.history(testenv.Prefix()+"-nope", "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not_found", r.Status)
}

// serveHistory runs testHistory on a service over stock.
func serveHistory(t *testing.T, stock inventory.StockManager) {
	sku := testenv.Prefix() + "/shoe" // a SKU may hold a slash
	require.NoError(t, stock.Init(context.Background(), sku, 5))
	testHistory(t, serve(t, stock, 5*time.Second), sku)
}

func TestHistoryOnRedis(t *testing.T) {
	rc := testenv.Redis(t)
	m, err := luascript.New(rc, luascript.WithPrefix(testenv.RedisPrefix(t, rc)), luascript.WithLedger(0))
	require.NoError(t, err)
	serveHistory(t, m)
}

func TestHistoryOnSQLite(t *testing.T) {
	db := testenv.SQLite(t)
	t.Run("optimistic", func(t *testing.T) {
		m, err := optimistic.New(db, optimistic.WithLedger())
		require.NoError(t, err)
		require.NoError(t, m.CreateTables(context.Background()))
		serveHistory(t, m)
	})
	t.Run("rowlock", func(t *testing.T) {
		m, err := rowlock.New(db, rowlock.WithLedger())
		require.NoError(t, err)
		require.NoError(t, m.CreateTables(context.Background()))
		serveHistory(t, m)
	})
}

// tiered.WithLedger over Redis and SQLite, no syncer running: a read
// syncs the SKU's journal to SQL before it reads the rows.
func TestHistoryOnTiered(t *testing.T) {
	rc := testenv.Redis(t)
	m, err := tiered.New(rc, testenv.SQLite(t), tiered.WithPrefix(testenv.RedisPrefix(t, rc)), tiered.WithLedger())
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	require.NoError(t, m.CreateTables(context.Background()))
	serveHistory(t, m)
}

// The lock strategies keep the ledger in their store: redislock over
// redisstore.WithLedger, redislock and zklock over sqlstore.WithLedger.
func TestHistoryOnLockStrategies(t *testing.T) {
	rc := testenv.Redis(t)
	sqlStore := func(t *testing.T) *sqlstore.Store {
		s, err := sqlstore.New(testenv.SQLite(t), sqlstore.WithLedger())
		require.NoError(t, err)
		require.NoError(t, s.CreateTables(context.Background()))
		return s
	}
	t.Run("redislock/redisstore", func(t *testing.T) {
		p := testenv.RedisPrefix(t, rc)
		s, err := redisstore.New(rc, redisstore.WithPrefix(p), redisstore.WithLedger(0))
		require.NoError(t, err)
		m, err := redislock.New(rc, s, redislock.WithPrefix(p))
		require.NoError(t, err)
		serveHistory(t, m)
	})
	t.Run("redislock/sqlstore", func(t *testing.T) {
		m, err := redislock.New(rc, sqlStore(t), redislock.WithPrefix(testenv.RedisPrefix(t, rc)))
		require.NoError(t, err)
		serveHistory(t, m)
	})
	t.Run("zklock/sqlstore", func(t *testing.T) {
		conn := testenv.ZooKeeper(t)
		m, err := zklock.New(conn, sqlStore(t), zklock.WithRoot(testenv.ZKRoot(t, conn)))
		require.NoError(t, err)
		serveHistory(t, m)
	})
}

// -ledger makes the service's store keep the ledger for the lock
// strategies (sqllock, redislock over -store sql and -store redis), and
// tiered keep one.
func TestHistoryFlagStrategies(t *testing.T) {
	p := testenv.Prefix()
	sku := p + "/shoe"
	t.Run("sqllock", func(t *testing.T) {
		c, _ := start(t, "-strategy", "sqllock", "-sql-driver", "pgx", "-dsn", privatePostgres(t), "-ledger", "-init", sku+"=5")
		testHistory(t, c, sku)
	})
	redisAddr := testenv.Get(testenv.EnvRedis, testenv.DefaultRedis)
	t.Run("redislock/sql", func(t *testing.T) {
		c, _ := start(t, "-strategy", "redislock", "-store", "sql", "-dsn", sqliteDSN(t), "-redis", redisAddr, "-ledger", "-init", sku+"=5")
		testHistory(t, c, sku)
	})
	t.Run("redislock/redis", func(t *testing.T) { // the lock's keys and the store's under their default prefixes
		rdb := testenv.Redis(t)
		t.Cleanup(func() { testenv.DeleteKeys(t, rdb, "*"+p+"*") }) // the SKU's keys and its order's
		c, _ := start(t, "-strategy", "redislock", "-store", "redis", "-redis", redisAddr, "-ledger", "-ledger-max-len", "1000", "-init", sku+"=5")
		testHistory(t, c, sku)
	})
	t.Run("tiered", func(t *testing.T) {
		rdb := testenv.Redis(t)
		t.Cleanup(func() {
			testenv.DeleteKeys(t, rdb, "*"+p+"*")           // the SKU's keys and its order's
			testenv.DeleteKeys(t, rdb, "tiered:run")        // the service's Manager stamps the server's run_id under its prefix
			rdb.ZRem(context.Background(), "tiered:x", sku) // and indexes the SKU of its hold for Sweep
		})
		c, _ := start(t, "-strategy", "tiered", "-redis", redisAddr, "-dsn", sqliteDSN(t), "-ledger", "-init", sku+"=5")
		testHistory(t, c, sku)
	})
}

// The service run with -ledger serves the history through its decorators
// (otelstock, ratelimit); without it, it answers 501.
func TestHistoryFlag(t *testing.T) {
	dsn := sqliteDSN(t)
	c, stop := start(t, "-strategy", "optimistic", "-dsn", dsn, "-ledger", "-rate-per-sku", "1000", "-init", "a/shoe=5")
	testHistory(t, c, "a/shoe")
	stop()

	c, _ = start(t, "-strategy", "optimistic", "-dsn", dsn, "-init", "shoe=1")
	code, r := c.history("shoe", "")
	assert.Equal(t, http.StatusNotImplemented, code)
	assert.Equal(t, "not_implemented", r.Status)
	assert.Contains(t, r.Message, "-ledger")
}

// A strategy that keeps no ledger answers 501, after bad input's 400.
func TestHistoryNotKept(t *testing.T) {
	rc := testenv.Redis(t)
	off, err := luascript.New(rc, luascript.WithPrefix(testenv.RedisPrefix(t, rc)))
	require.NoError(t, err)
	for name, stock := range map[string]inventory.StockManager{
		"not a ledger.Reader": inventorytest.NewMemory(0),
		"made without ledger": off,
	} {
		c := serve(t, stock, time.Second)
		code, r := c.history("shoe", "?limit=5")
		assert.Equal(t, http.StatusNotImplemented, code, name)
		assert.Equal(t, "not_implemented", r.Status, name)
		assert.Equal(t, "this service keeps no movement ledger: run it with -ledger (every -strategy keeps one)", r.Message, name)
		code, r = c.history("shoe", "?limit=0")
		assert.Equal(t, http.StatusBadRequest, code, name)
		assert.Equal(t, "invalid", r.Status, name)
	}
}

func TestHistoryBadRequests(t *testing.T) {
	rc := testenv.Redis(t)
	m, err := luascript.New(rc, luascript.WithPrefix(testenv.RedisPrefix(t, rc)), luascript.WithLedger(0))
	require.NoError(t, err)
	require.NoError(t, m.Init(context.Background(), "shoe", 1))
	c := serve(t, m, time.Second)
	for q, msg := range map[string]string{
		"?limit=0":                    "inventory: invalid argument: ledger page limit 0 outside 1..1000",
		"?limit=1001":                 "inventory: invalid argument: ledger page limit 1001 outside 1..1000",
		"?after=-1":                   "inventory: invalid argument: ledger position -1 is negative",
		"?limit=x":                    `inventory: invalid argument: limit "x": want an integer: invalid syntax`,
		"?after=1.5":                  `inventory: invalid argument: after "1.5": want an integer: invalid syntax`,
		"?after=1e999":                `inventory: invalid argument: after "1e999": want an integer: invalid syntax`,
		"?limit=99999999999999999999": `inventory: invalid argument: limit "99999999999999999999": want an integer: value out of range`,
	} {
		code, r := c.history("shoe", q)
		assert.Equal(t, http.StatusBadRequest, code, q)
		assert.Equal(t, "invalid", r.Status, q)
		assert.Equal(t, msg, r.Message, q)
	}
	code, r := c.history("a\tb", "")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, r.Message, "invalid argument")
	code, h, r := c.do("POST", "/history/shoe", "")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	assert.Equal(t, "GET, HEAD", h.Get("Allow"))
	assert.Equal(t, "method_not_allowed", r.Status)
	code, r = c.history("shoe", "?limit=1000")
	assert.Equal(t, http.StatusOK, code, "limit 1000 is in range")
	assert.Len(t, r.Entries, 1)
}
