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
	"github.com/stockkit/inventory/rowlock"
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
	order := testenv.Prefix() + "-order"
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
		assert.Equal(t, "this service keeps no movement ledger: run it with -ledger (strategies optimistic, rowlock, luascript)", r.Message, name)
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
