// The tests are in package main because a command cannot be imported.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/tiered"
)

var quiet = slog.New(slog.DiscardHandler)

// client talks to one test server.
type client struct {
	t   *testing.T
	url string
}

func serve(t *testing.T, stock inventory.StockManager, timeout time.Duration) client {
	srv := httptest.NewServer(newHandler(stock, timeout, time.Minute, quiet))
	t.Cleanup(srv.Close)
	return client{t, srv.URL}
}

// do sends a request and decodes the answer.
func (c client) do(method, path, body string) (int, http.Header, response) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	require.NoError(c.t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	var r response
	if res.Header.Get("Content-Type") == "application/json" {
		require.NoError(c.t, json.NewDecoder(res.Body).Decode(&r))
	}
	return res.StatusCode, res.Header, r
}

func (c client) buy(sku, buyer string, qty int64) (int, response) {
	c.t.Helper()
	body, err := json.Marshal(map[string]any{"sku": sku, "buyer": buyer, "qty": qty})
	require.NoError(c.t, err)
	code, _, r := c.do("POST", "/buy", string(body))
	return code, r
}

func remaining(r response) int64 {
	if r.Remaining == nil {
		return -1
	}
	return *r.Remaining
}

// testSale runs the same flash sale over the HTTP API of any strategy.
func testSale(t *testing.T, stock inventory.StockManager) {
	ctx := context.Background()
	c := serve(t, stock, 5*time.Second)
	sku := testenv.Prefix() + "/sneaker 42 {\"x\"}" // any valid SKU, slash and quotes too
	require.NoError(t, stock.Init(ctx, sku, 3))

	code, r := c.buy(sku, "ann", 1)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "bought", r.Status)
	assert.EqualValues(t, 2, remaining(r))

	code, r = c.buy(sku, "ann", 1)
	assert.Equal(t, http.StatusOK, code, "a repeat is answered as the first time")
	assert.Equal(t, "already_bought", r.Status)
	assert.EqualValues(t, 2, remaining(r), "the repeat reports the first purchase's remaining")
	assert.Contains(t, r.Message, "already bought")

	code, r = c.buy(sku, "bob", 5)
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "sold_out", r.Status)
	assert.EqualValues(t, 2, remaining(r))

	code, r = c.buy(sku, "bob", 2)
	assert.Equal(t, http.StatusOK, code, "bob's refused call did not use up his key")
	assert.EqualValues(t, 0, remaining(r))

	code, r = c.buy(sku, "cat", 1)
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "sold_out", r.Status)

	code, _, r = c.do("GET", "/stock/"+url.PathEscape(sku), "")
	assert.Equal(t, http.StatusOK, code)
	require.NotNil(t, r.Stock)
	assert.EqualValues(t, 0, *r.Stock)
	assert.Equal(t, sku, r.SKU)

	code, r = c.buy(testenv.Prefix()+"-unknown", "ann", 1)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not_found", r.Status)
	code, _, r = c.do("GET", "/stock/"+testenv.Prefix()+"-unknown", "")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not_found", r.Status)

	// Concurrent buyers on fresh stock: exactly the stock is sold.
	hot := testenv.Prefix() + "-hot"
	const units, buyers = 20, 100
	require.NoError(t, stock.Init(ctx, hot, units))
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			code, _ := c.buy(hot, fmt.Sprintf("buyer-%d", i), 1)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{http.StatusOK: units, http.StatusConflict: buyers - units}, codes)
	left, err := stock.Get(ctx, hot)
	require.NoError(t, err)
	assert.Zero(t, left)
}

func TestLuascriptOnRedis(t *testing.T) {
	c := testenv.Redis(t)
	m, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	testSale(t, m)
}

func TestSQLStrategiesOnSQLite(t *testing.T) {
	db := testenv.SQLite(t)
	s, err := sqlstore.New(db)
	require.NoError(t, err)
	require.NoError(t, s.CreateTables(context.Background()))
	t.Run("rowlock", func(t *testing.T) {
		m, err := rowlock.New(db)
		require.NoError(t, err)
		testSale(t, m)
	})
	t.Run("optimistic", func(t *testing.T) {
		m, err := optimistic.New(db)
		require.NoError(t, err)
		testSale(t, m)
	})
}

func TestBadRequests(t *testing.T) {
	stock := inventorytest.NewMemory(0)
	require.NoError(t, stock.Init(context.Background(), "sku", 10))
	c := serve(t, stock, time.Second)
	for name, body := range map[string]string{
		"not JSON":      `sku=sku`,
		"unknown field": `{"sku":"sku","buyer":"a","price":1}`,
		"no buyer":      `{"sku":"sku"}`,
		"no sku":        `{"buyer":"a"}`,
		"zero qty":      `{"sku":"sku","buyer":"a","qty":0}`,
		"negative qty":  `{"sku":"sku","buyer":"a","qty":-1}`,
		"control char":  `{"sku":"s\u0000ku","buyer":"a"}`,
		"huge body":     `{"sku":"sku","buyer":"` + strings.Repeat("a", maxBody) + `"}`,
		"data after":    `{"sku":"sku","buyer":"a"}garbage`,
		"two objects":   `{"sku":"sku","buyer":"a"}{"sku":"sku","buyer":"b"}`,
	} {
		code, _, r := c.do("POST", "/buy", body)
		assert.Equal(t, http.StatusBadRequest, code, name)
		assert.Equal(t, "invalid", r.Status, name)
		assert.NotEmpty(t, r.Message, name)
	}
	// The API's own words, not the library's (the buyer id is its key).
	code, _, r := c.do("POST", "/buy", `{"sku":"sku"}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "buyer is required: the buyer id makes a purchase happen once per buyer and SKU", r.Message)
	code, _, _ = c.do("GET", "/stock/"+url.PathEscape("a\tb"), "")
	assert.Equal(t, http.StatusBadRequest, code)
	left, err := stock.Get(context.Background(), "sku")
	require.NoError(t, err)
	assert.EqualValues(t, 10, left, "no bad request took stock")

	// qty defaults to 1; white space after the object is no data.
	code, _, r = c.do("POST", "/buy", "{\"sku\":\"sku\",\"buyer\":\"a\"}\r\n")
	assert.Equal(t, http.StatusOK, code)
	assert.EqualValues(t, 9, remaining(r))
}

// Unknown paths and wrong methods are answered in the same JSON shape as
// everything else.
func TestNotFoundAndMethodNotAllowedAreJSON(t *testing.T) {
	c := serve(t, inventorytest.NewMemory(0), time.Second)
	for _, tc := range []struct {
		method, path string
		code         int
		status       string
		allow        string
	}{
		{"GET", "/buy", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{"DELETE", "/buy", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{"POST", "/stock/sku", http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD"},
		{"GET", "/nope", http.StatusNotFound, "not_found", ""},
		{"POST", "/", http.StatusNotFound, "not_found", ""},
	} {
		name := tc.method + " " + tc.path
		code, h, r := c.do(tc.method, tc.path, "")
		assert.Equal(t, tc.code, code, name)
		assert.Equal(t, "application/json", h.Get("Content-Type"), name)
		assert.Equal(t, tc.status, r.Status, name)
		assert.NotEmpty(t, r.Message, name)
		assert.Equal(t, tc.allow, h.Get("Allow"), name)
	}
}

// A client that goes away mid-request is not logged as a backend error;
// a backend that fails still is.
func TestClientGoneIsNotAnError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stock     failing
		cancel    bool
		wantError bool
	}{
		{"client gone", failing{wait: true}, true, false},
		{"backend down", failing{err: errors.New("dial tcp: connection refused")}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := newHandler(tc.stock, time.Minute, time.Minute, slog.New(slog.NewTextHandler(&logs, nil)))
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			}
			defer cancel()
			req := httptest.NewRequestWithContext(ctx, "POST", "/buy", strings.NewReader(`{"sku":"sku","buyer":"a"}`))
			h.ServeHTTP(httptest.NewRecorder(), req)
			assert.Equal(t, tc.wantError, strings.Contains(logs.String(), "level=ERROR"), "log:\n%s", logs.String())
		})
	}
}

// The SQL pool is bounded by -sql-conns, below the server's connection
// limit, so a burst of requests waits for a connection instead of being
// refused by the server.
func TestSQLPoolIsBounded(t *testing.T) {
	dsn := "file:" + filepath.Join(t.TempDir(), "stock.db")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 32},
		{[]string{"-sql-conns", "5"}, 5},
	} {
		cfg, err := parseFlags(append([]string{"-dsn", dsn}, tc.args...), io.Discard)
		require.NoError(t, err)
		b := &backends{cfg: cfg}
		db, _, err := b.sql(context.Background())
		require.NoError(t, err)
		assert.Equal(t, tc.want, db.Stats().MaxOpenConnections, "%q", tc.args)
		b.close()
	}
	require.ErrorIs(t, run(context.Background(), []string{"-sql-conns", "0"}, io.Discard, io.Discard), errUsage)
}

// Every Redis client the service makes honours its call's deadline while
// the server hangs (ContextTimeoutEnabled), and Redlock nodes never resend
// a command (MaxRetries -1).
func TestRedisClientsHonourDeadline(t *testing.T) {
	addr := faulttest.HungServer(t)
	b := &backends{cfg: &config{}}
	defer b.close()
	for name, c := range map[string]redis.UniversalClient{
		"redis":        b.redis(addr),
		"redlock node": b.redlockNode(addr),
	} {
		_, err := faulttest.CheckLate(t, name, 200*time.Millisecond, func(ctx context.Context) error {
			return c.Ping(ctx).Err()
		})
		require.Error(t, err, name)
	}
	node, ok := b.redlockNode(addr).(*redis.Client)
	require.True(t, ok)
	assert.Zero(t, node.Options().MaxRetries, "a Redlock node does not resend")
	assert.True(t, node.Options().ContextTimeoutEnabled)
}

// failing answers every call with err, after waiting for ctx when wait is set.
type failing struct {
	*inventorytest.Memory
	err  error
	wait bool
}

func (f failing) Reduce(ctx context.Context, _ string, _ int64, _ ...inventory.Option) (int64, error) {
	if f.wait {
		<-ctx.Done()
		return 0, fmt.Errorf("backend: %w", ctx.Err())
	}
	return 0, f.err
}

func TestBackendFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stock      failing
		code       int
		status     string
		retryAfter bool
	}{
		{"contention", failing{err: fmt.Errorf("lock: %w", inventory.ErrContention)}, http.StatusServiceUnavailable, "busy", true},
		{"backend down", failing{err: errors.New("dial tcp: connection refused")}, http.StatusServiceUnavailable, "unavailable", true},
		{"backend timeout", failing{err: fmt.Errorf("redis: %w", context.DeadlineExceeded)}, http.StatusGatewayTimeout, "timeout", false},
		{"request timeout", failing{wait: true}, http.StatusGatewayTimeout, "timeout", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, tc.stock, 50*time.Millisecond)
			code, h, r := c.do("POST", "/buy", `{"sku":"sku","buyer":"a"}`)
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.status, r.Status)
			assert.NotContains(t, r.Message, "connection refused", "backend details stay in the log")
			if tc.retryAfter {
				assert.Equal(t, "1", h.Get("Retry-After"))
			}
		})
	}
}

// start runs the service with args until the returned stop is called, and
// returns a client of it.
func start(t *testing.T, args ...string) (c client, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), w, &stderr)
		w.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cancel()
		<-done
		t.Fatalf("the service did not start: %v; stderr: %s", err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	_, addr, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	require.True(t, ok, line)
	addr, _, _ = strings.Cut(addr, ",")
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return client{t, addr}, stop
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func sqliteDSN(t *testing.T) string {
	return "file:" + filepath.Join(t.TempDir(), "stock.db") + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"
}

// run serves a real strategy on a port, answers, and shuts down gracefully
// when its context ends.
func TestRunAndShutdown(t *testing.T) {
	c, stop := start(t, "-strategy", "rowlock", "-dsn", sqliteDSN(t), "-init", "shoe=2", "-init", "a=b=1")
	code, r := c.buy("shoe", "ann", 1)
	assert.Equal(t, http.StatusOK, code)
	assert.EqualValues(t, 1, remaining(r))
	code, _, r = c.do("GET", "/stock/a=b", "")
	assert.Equal(t, http.StatusOK, code, "-init splits at the last =")
	assert.EqualValues(t, 1, *r.Stock)

	stop()
	_, err := http.Get(c.url + "/stock/shoe")
	require.Error(t, err, "the server no longer accepts")
}

// A restart with the same -init does not put sold stock back; -init-force
// does.
func TestInitKeepsExistingStock(t *testing.T) {
	dsn := sqliteDSN(t)
	stock := func(c client) int64 {
		code, _, r := c.do("GET", "/stock/shoe", "")
		require.Equal(t, http.StatusOK, code)
		return *r.Stock
	}
	c, stop := start(t, "-dsn", dsn, "-init", "shoe=3")
	code, _ := c.buy("shoe", "ann", 2)
	require.Equal(t, http.StatusOK, code)
	stop()

	c, stop = start(t, "-dsn", dsn, "-init", "shoe=3")
	assert.EqualValues(t, 1, stock(c), "a restart keeps the stock that was left")
	stop()

	c, stop = start(t, "-dsn", dsn, "-init", "shoe=3", "-init-force")
	assert.EqualValues(t, 3, stock(c), "-init-force overwrites it")
	stop()
}

func TestRunRefusesBadConfig(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"-strategy", "carrier-pigeon"},
		{"-strategy", "redislock", "-store", "floppy"},
		{"-strategy", "rowlock", "-sql-driver", "oracle"},
		{"-init", "noqty"},
		{"-strategy", "luascript", "-ledger", "-ledger-max-len", "-1"},
		{"stray"},
	} {
		err := run(ctx, args, io.Discard, io.Discard)
		require.Error(t, err, "%q", args)
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// metric returns the value of the Prometheus sample of name whose labels
// include every one of labels (name="value" pairs), summed over the
// samples that match, and -1 if none does.
func metric(t *testing.T, text, name string, labels ...string) float64 {
	t.Helper()
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(rest, l)
		}
		if !all {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		require.NotEmpty(t, f, line)
		v, err := strconv.ParseFloat(f[0], 64)
		require.NoError(t, err, line)
		sum, found = sum+v, true
	}
	if !found {
		return -1
	}
	return sum
}

func scrape(t *testing.T, c client) string {
	t.Helper()
	res, err := http.Get(c.url + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(body)
}

// /metrics counts every purchase by outcome, and a purchase over
// -rate-per-sku is refused busy and counted as contention, before it
// reaches the backend.
func TestMetricsAndRateLimit(t *testing.T) {
	c, _ := start(t, "-strategy", "rowlock", "-dsn", sqliteDSN(t), "-init", "shoe=2", "-init", "hat=5",
		"-rate-per-sku", "0.001", "-burst-per-sku", "4") // 4 at once, then one per 1,000s: no refill during the test
	var codes []int
	for _, buyer := range []string{"ann", "bob", "cat", "ann", "dan", "eve"} {
		code, _ := c.buy("shoe", buyer, 1)
		codes = append(codes, code)
	}
	// shoe: 4 calls at once, then refused: ann and bob buy, cat finds it
	// sold out, ann's repeat is a duplicate; dan and eve are over the limit.
	assert.Equal(t, []int{200, 200, 409, 200, 503, 503}, codes)
	code, r := c.buy("hat", "dan", 1)
	assert.Equal(t, http.StatusOK, code, "hat has a bucket of its own")
	assert.EqualValues(t, 4, remaining(r))
	code, h, r := c.do("POST", "/buy", `{"sku":"shoe","buyer":"fay"}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "busy", r.Status)
	assert.Equal(t, "1", h.Get("Retry-After"))

	text := scrape(t, c)
	const calls = "inventory_client_operations_total"
	reduce := `inventory_operation="reduce"`
	strategy := `inventory_strategy="rowlock"`
	for _, tc := range []struct {
		outcome string
		want    float64
	}{{"ok", 3}, {"insufficient", 1}, {"duplicate", 1}, {"contention", 3}, {"error", -1}} {
		assert.Equal(t, tc.want, metric(t, text, calls, reduce, strategy, `inventory_outcome="`+tc.outcome+`"`), "reduce %s:\n%s", tc.outcome, text)
	}
	assert.Equal(t, 2.0, metric(t, text, calls, `inventory_operation="init"`, `inventory_outcome="ok"`), "-init made two SKUs")
	assert.Equal(t, 8.0, metric(t, text, "inventory_client_operation_duration_seconds_count", reduce), "one duration per purchase")
	assert.Equal(t, 3.0, metric(t, text, "inventory_client_units_total", `inventory_direction="reduce"`), "units sold")
	assert.Equal(t, 0.0, metric(t, text, "inventory_client_active_operations", reduce), "nothing in flight")
	// The Go runtime's and the process's metrics are there too, and no
	// series has an empty label (the exporter's otel_scope_schema_url was).
	assert.Regexp(t, `(?m)^go_goroutines [0-9]+$`, text)
	assert.Regexp(t, `(?m)^go_memstats_heap_alloc_bytes [0-9.e+]+$`, text)
	assert.Regexp(t, `(?m)^process_resident_memory_bytes [0-9.e+]+$`, text)
	assert.NotContains(t, text, `=""`, "an empty label")
	assert.NotContains(t, text, "otel_scope_", "a scope label on every series")

	code, _, r = c.do("GET", "/stock/shoe", "")
	require.Equal(t, http.StatusOK, code)
	assert.EqualValues(t, 0, *r.Stock, "the refused purchases took nothing")
	code, _, _ = c.do("POST", "/metrics", "")
	assert.Equal(t, http.StatusNotFound, code, "POST /metrics is not a route")
}

func TestBadRateFlags(t *testing.T) {
	for _, args := range [][]string{{"-rate", "-1"}, {"-rate-per-sku", "-0.5"}, {"-rate", "NaN"}, {"-burst", "-1"}} {
		require.ErrorIs(t, run(context.Background(), args, io.Discard, io.Discard), errUsage, "%q", args)
	}
}

// post sends body as JSON and decodes the answer.
func (c client) post(path string, body any) (int, response) {
	c.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(c.t, err)
	code, _, r := c.do("POST", path, string(b))
	return code, r
}

// stockOf returns the stock and held units of sku, as GET /stock answers.
func (c client) stockOf(sku string) (stock, held int64) {
	c.t.Helper()
	code, _, r := c.do("GET", "/stock/"+url.PathEscape(sku), "")
	require.Equal(c.t, http.StatusOK, code, r.Message)
	require.NotNil(c.t, r.Stock)
	require.NotNil(c.t, r.Held, "an order manager's GET /stock says what is held")
	return *r.Stock, *r.Held
}

type lines = []map[string]any

// testOrders drives POST /reserve, /confirm and /cancel of any strategy,
// with a hold that expires.
func testOrders(t *testing.T, stock inventory.StockManager) {
	ctx := context.Background()
	c := serve(t, stock, 5*time.Second)
	p := testenv.Prefix()
	shirt, hat := p+"-shirt", p+"-hat"
	require.NoError(t, stock.Init(ctx, shirt, 5))
	require.NoError(t, stock.Init(ctx, hat, 2))
	cart := lines{{"sku": shirt, "qty": 2}, {"sku": hat, "qty": 1}}

	order := p + "-order-1"
	code, r := c.post("/reserve", map[string]any{"order": order, "lines": cart})
	require.Equal(t, http.StatusOK, code, r.Message)
	assert.Equal(t, "reserved", r.Status)
	assert.Equal(t, order, r.Order)
	assert.EqualValues(t, time.Minute.Milliseconds(), r.TTLMS, "the handler's default hold TTL")
	s, h := c.stockOf(shirt)
	assert.Equal(t, [2]int64{3, 2}, [2]int64{s, h}, "shirt: 3 available, 2 held")

	code, r = c.post("/reserve", map[string]any{"order": order, "lines": cart})
	assert.Equal(t, http.StatusOK, code, "a retry of the same order is answered, not refused")
	assert.Equal(t, "already_reserved", r.Status)
	s, h = c.stockOf(shirt)
	assert.Equal(t, [2]int64{3, 2}, [2]int64{s, h}, "the retry took nothing more")

	code, r = c.post("/reserve", map[string]any{"order": p + "-order-2", "lines": lines{{"sku": shirt, "qty": 1}, {"sku": hat, "qty": 5}}})
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "sold_out", r.Status)
	if assert.NotEmpty(t, r.Short) {
		assert.Contains(t, r.Short, shortLine{SKU: hat, Qty: 5, Available: 1}, "the short line, with what was available")
		for _, l := range r.Short {
			assert.NotEqual(t, shirt, l.SKU, "the shirt line fitted")
		}
	}
	s, _ = c.stockOf(shirt)
	assert.EqualValues(t, 3, s, "a refused cart takes no line")

	code, r = c.post("/reserve", map[string]any{"order": p + "-order-3", "lines": lines{{"sku": p + "-unknown", "qty": 1}}})
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "not_found", r.Status)

	code, r = c.post("/confirm", map[string]any{"order": order})
	assert.Equal(t, http.StatusOK, code, r.Message)
	assert.Equal(t, "confirmed", r.Status)
	code, r = c.post("/confirm", map[string]any{"order": order})
	assert.Equal(t, http.StatusOK, code, "a retried payment learns that it paid")
	assert.Equal(t, "already_confirmed", r.Status)
	code, r = c.post("/cancel", map[string]any{"order": order})
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "confirmed", r.Status, "a confirmed order is not cancelled: a refund is a return")
	s, h = c.stockOf(shirt)
	assert.Equal(t, [2]int64{3, 0}, [2]int64{s, h}, "shirt: 2 sold, none held")

	// A hold that expires: its units come back, and a late Confirm is 410.
	late := p + "-order-late"
	code, r = c.post("/reserve", map[string]any{"order": late, "lines": lines{{"sku": shirt, "qty": 3}}, "ttl_ms": 200})
	require.Equal(t, http.StatusOK, code, r.Message)
	assert.EqualValues(t, 200, r.TTLMS)
	code, _ = c.buy(shirt, "ann", 1)
	assert.Equal(t, http.StatusConflict, code, "the held units are not for sale")
	time.Sleep(400 * time.Millisecond)
	code, r = c.post("/confirm", map[string]any{"order": late})
	assert.Equal(t, http.StatusGone, code)
	assert.Equal(t, "released", r.Status)
	s, h = c.stockOf(shirt)
	assert.Equal(t, [2]int64{3, 0}, [2]int64{s, h}, "the expired hold's units are back")
	code, r = c.post("/cancel", map[string]any{"order": late})
	assert.Equal(t, http.StatusOK, code, "cancelling an expired hold is a no-op")
	assert.Equal(t, "cancelled", r.Status)

	// Cancel before paying: the units come back at once.
	gone := p + "-order-cancelled"
	code, _ = c.post("/reserve", map[string]any{"order": gone, "lines": lines{{"sku": hat, "qty": 1}}})
	require.Equal(t, http.StatusOK, code)
	for range 2 {
		code, r = c.post("/cancel", map[string]any{"order": gone})
		assert.Equal(t, http.StatusOK, code, "Cancel is idempotent")
		assert.Equal(t, "cancelled", r.Status)
	}
	code, r = c.post("/confirm", map[string]any{"order": gone})
	assert.Equal(t, http.StatusGone, code)
	assert.Equal(t, "released", r.Status)
	s, h = c.stockOf(hat)
	assert.Equal(t, [2]int64{1, 0}, [2]int64{s, h}, "hat: 1 sold, 1 back")

	for _, path := range []string{"/confirm", "/cancel"} {
		code, r = c.post(path, map[string]any{"order": p + "-never"})
		assert.Equal(t, http.StatusNotFound, code, path)
		assert.Equal(t, "not_found", r.Status, path)
	}
}

func TestOrdersOnRedis(t *testing.T) {
	c := testenv.Redis(t)
	m, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	testOrders(t, m)
}

func TestOrdersOnMariaDB(t *testing.T) {
	db := testenv.MySQL(t)
	p := strings.ReplaceAll(testenv.Prefix(), "-", "_")
	schema := sqlstore.Schema{Table: p + "_stock", Ledger: p + "_ledger", Holds: p + "_holds", Orders: p + "_orders"}
	sqltest.Drop(t, db, schema.Table, schema.Ledger, schema.Holds, schema.Orders)
	s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, s.CreateTables(context.Background()))
	m, err := rowlock.New(db, rowlock.WithSchema(schema))
	require.NoError(t, err)
	testOrders(t, m)
}

func TestOrdersOnMemory(t *testing.T) {
	testOrders(t, inventorytest.NewMemory(time.Minute))
}

func TestBadOrderRequests(t *testing.T) {
	stock := inventorytest.NewMemory(0)
	require.NoError(t, stock.Init(context.Background(), "sku", 10))
	c := serve(t, stock, time.Second)
	many := make([]string, inventory.MaxLines+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"sku":"s%d","qty":1}`, i)
	}
	for name, tc := range map[string]struct{ path, body string }{
		"not JSON":       {"/reserve", `order=o`},
		"unknown field":  {"/reserve", `{"order":"o","lines":[{"sku":"sku","qty":1}],"price":1}`},
		"no order":       {"/reserve", `{"lines":[{"sku":"sku","qty":1}]}`},
		"no lines":       {"/reserve", `{"order":"o"}`},
		"empty lines":    {"/reserve", `{"order":"o","lines":[]}`},
		"repeated sku":   {"/reserve", `{"order":"o","lines":[{"sku":"sku","qty":1},{"sku":"sku","qty":1}]}`},
		"zero qty":       {"/reserve", `{"order":"o","lines":[{"sku":"sku","qty":0}]}`},
		"no qty":         {"/reserve", `{"order":"o","lines":[{"sku":"sku"}]}`},
		"bad ttl":        {"/reserve", `{"order":"o","lines":[{"sku":"sku","qty":1}],"ttl_ms":0}`},
		"too many lines": {"/reserve", `{"order":"o","lines":[` + strings.Join(many, ",") + `]}`},
		"data after":     {"/reserve", `{"order":"o","lines":[{"sku":"sku","qty":1}]} x`},
		"confirm no id":  {"/confirm", `{}`},
		"cancel bad id":  {"/cancel", `{"order":"a\u0000b"}`},
		"confirm extra":  {"/confirm", `{"order":"o","lines":[]}`},
	} {
		code, _, r := c.do("POST", tc.path, tc.body)
		assert.Equal(t, http.StatusBadRequest, code, name)
		assert.Equal(t, "invalid", r.Status, name)
		assert.NotEmpty(t, r.Message, name)
	}
	for path, body := range map[string]string{"/reserve": `{"lines":[{"sku":"sku","qty":1}]}`, "/confirm": `{}`, "/cancel": `{"order":""}`} {
		_, _, r := c.do("POST", path, body)
		assert.Equal(t, "order is required: the order id is the hold's id, so that a retry holds the cart once", r.Message, path)
	}
	left, err := stock.Get(context.Background(), "sku")
	require.NoError(t, err)
	assert.EqualValues(t, 10, left, "no bad request held stock")
	held, err := stock.Held(context.Background(), "sku")
	require.NoError(t, err)
	assert.Zero(t, held)
	code, h, r := c.do("GET", "/reserve", "")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	assert.Equal(t, "POST", h.Get("Allow"))
	assert.Equal(t, "method_not_allowed", r.Status)
}

// A strategy without holds answers the order endpoints 501.
func TestOrdersNotImplemented(t *testing.T) {
	c := serve(t, plainStock{inventorytest.NewMemory(0)}, time.Second)
	code, r := c.post("/reserve", map[string]any{"order": "o", "lines": lines{{"sku": "sku", "qty": 1}}})
	assert.Equal(t, http.StatusNotImplemented, code)
	assert.Equal(t, "not_implemented", r.Status)
}

// plainStock is a StockManager without the order calls: only the
// interface's methods are promoted.
type plainStock struct{ inventory.StockManager }

// The service's reaper releases an expired hold though nobody touches its
// SKU again (GET /stock moves nothing), and /metrics counts the order calls.
func TestReaperReleasesHolds(t *testing.T) {
	c, _ := start(t, "-strategy", "rowlock", "-dsn", sqliteDSN(t), "-init", "shoe=3", "-reap", "20ms")
	code, r := c.post("/reserve", map[string]any{"order": "o-1", "lines": lines{{"sku": "shoe", "qty": 2}}, "ttl_ms": 100})
	require.Equal(t, http.StatusOK, code, r.Message)
	s, h := c.stockOf("shoe")
	require.Equal(t, [2]int64{1, 2}, [2]int64{s, h})
	require.Eventually(t, func() bool {
		s, h = c.stockOf("shoe")
		return s == 3 && h == 0
	}, 10*time.Second, 20*time.Millisecond, "the reaper gives the expired hold's units back: stock %d, held %d", s, h)

	// The units are back once the Sweep commits; its metrics are recorded
	// after it returns, a moment later.
	var text string
	require.Eventually(t, func() bool {
		text = scrape(t, c)
		return metric(t, text, "inventory_client_released_holds_total") >= 0
	}, 10*time.Second, 20*time.Millisecond, "no released-holds metric")
	const calls = "inventory_client_operations_total"
	assert.Equal(t, 1.0, metric(t, text, calls, `inventory_operation="reserve"`, `inventory_outcome="ok"`), text)
	assert.Positive(t, metric(t, text, calls, `inventory_operation="sweep"`, `inventory_outcome="ok"`), "the reaper's Sweeps")
	assert.Equal(t, 1.0, metric(t, text, "inventory_client_released_holds_total"), "one hold released by a Sweep")

	require.ErrorIs(t, run(context.Background(), []string{"-hold-ttl", "0s"}, io.Discard, io.Discard), errUsage)
	require.ErrorIs(t, run(context.Background(), []string{"-reap", "-1s"}, io.Discard, io.Discard), errUsage)
}

// A body shorter than its Content-Length, from a client that then waits
// for the answer, is answered at once, with that cause: the service used
// to wait for the missing bytes until its 10 s read timeout, then blame
// "data after the JSON object". A raw TCP client, since net/http's would
// not send such a request.
func TestShortBody(t *testing.T) {
	c, _ := start(t, "-strategy", "rowlock", "-dsn", sqliteDSN(t), "-init", "shoe=2")
	body := `{"sku":"shoe","buyer":"ann"}`
	for _, tc := range []struct{ declared, want string }{
		{"100", fmt.Sprintf("body: shorter than its Content-Length: 100 bytes declared, %d received", len(body))},
		{strconv.Itoa(len(body) + 1), fmt.Sprintf("body: shorter than its Content-Length: %d bytes declared, %d received", len(body)+1, len(body))},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(c.url, "http://"))
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(time.Minute))) // a bound for a broken run only
		_, err = fmt.Fprintf(conn, "POST /buy HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n%s", tc.declared, body)
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		var r response
		require.NoError(t, json.NewDecoder(res.Body).Decode(&r))
		res.Body.Close()
		conn.Close()
		assert.Equal(t, http.StatusBadRequest, res.StatusCode)
		assert.Equal(t, "invalid", r.Status)
		assert.Equal(t, tc.want, r.Message)
	}
	// Nothing was bought; a whole body, white space after it included, is
	// served as before.
	code, _, r := c.do("GET", "/stock/shoe", "")
	require.Equal(t, http.StatusOK, code)
	assert.EqualValues(t, 2, *r.Stock)
	code, _, r = c.do("POST", "/buy", body+" \n")
	assert.Equal(t, http.StatusOK, code, r.Message)
	// White space past what the decoder buffers is read without a wait,
	// and the connection serves the next request.
	for i := range 3 {
		code, _, r = c.do("POST", "/buy", fmt.Sprintf(`{"sku":"shoe","buyer":"bo-%d"}`, i)+strings.Repeat(" ", 3000))
		assert.Equal(t, []int{http.StatusOK, http.StatusConflict, http.StatusConflict}[i], code, "%d: %s", i, r.Message)
	}
}

// -strategy sqllock serves purchases and holds with MariaDB's or
// PostgreSQL's advisory locks; on SQLite it is refused.
func TestSQLLock(t *testing.T) {
	dsn := privatePostgres(t)
	sku := testenv.Prefix() + "-shoe"
	c, _ := start(t, "-strategy", "sqllock", "-sql-driver", "pgx", "-dsn", dsn, "-init", sku+"=2")
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusConflict} {
		code, r := c.buy(sku, fmt.Sprint("buyer-", i), 1)
		assert.Equal(t, want, code, "%d: %s", i, r.Message)
	}
	code, r := c.post("/reserve", map[string]any{"order": "o-1", "lines": lines{{"sku": sku, "qty": 1}}})
	assert.Equal(t, http.StatusConflict, code, "sold out: a hold runs: %s", r.Message)
	assert.Equal(t, "sold_out", r.Status)

	err := run(context.Background(), []string{"-strategy", "sqllock", "-dsn", sqliteDSN(t)}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "neither mysql nor pgx")
}

// privatePostgres returns a DSN of the PostgreSQL test database whose
// tables land in a schema of t's own (search_path), dropped when t ends:
// the service creates its tables under their default names.
func privatePostgres(t *testing.T) string {
	db := testenv.Postgres(t)
	schema := strings.ReplaceAll(testenv.Prefix(), "-", "_")
	_, err := db.Exec(`CREATE SCHEMA "` + schema + `"`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(`DROP SCHEMA "` + schema + `" CASCADE`) })
	u, err := url.Parse(testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres))
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// -strategy tiered sells from Redis before SQL, its syncer running in the
// service, and serves the order endpoints: a hold, its Confirm, a retried
// Confirm and a refused Cancel.
func TestTiered(t *testing.T) {
	rdb := testenv.Redis(t)
	sku := testenv.Prefix() + "-shoe"
	held := testenv.Prefix() + "-hat"
	t.Cleanup(func() {
		testenv.DeleteKeys(t, rdb, "*"+sku+"*")
		testenv.DeleteKeys(t, rdb, "*"+held+"*")
		testenv.DeleteKeys(t, rdb, "tiered:run")         // the service's Manager stamps the server's run_id under its prefix
		rdb.ZRem(context.Background(), "tiered:x", held) // and indexes the SKU of its hold for Sweep
	})
	c, stop := start(t, "-strategy", "tiered", "-redis", testenv.Get(testenv.EnvRedis, testenv.DefaultRedis),
		"-dsn", sqliteDSN(t), "-init", sku+"=2", "-init", held+"=3")
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusConflict} {
		code, r := c.buy(sku, fmt.Sprint("buyer-", i), 1)
		assert.Equal(t, want, code, "%d: %s", i, r.Message)
	}
	code, r := c.buy(sku, "buyer-0", 1)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "already_bought", r.Status)
	code, _, r = c.do("GET", "/stock/"+url.PathEscape(sku), "")
	assert.Equal(t, http.StatusOK, code)
	assert.EqualValues(t, 0, *r.Stock)
	var m inventory.StockManager = &tiered.Manager{}
	_, ok := m.(inventory.OrderManager)
	require.True(t, ok, "tiered is an inventory.OrderManager")
	order := testenv.Prefix() + "-order"
	t.Cleanup(func() { testenv.DeleteKeys(t, rdb, "*"+order+"*") })
	code, r = c.post("/reserve", map[string]any{"order": order, "lines": lines{{"sku": held, "qty": 2}}})
	require.Equal(t, http.StatusOK, code, r.Message)
	assert.Equal(t, "reserved", r.Status)
	s, h := c.stockOf(held)
	assert.Equal(t, [2]int64{1, 2}, [2]int64{s, h}, "1 available, 2 held")
	code, r = c.post("/confirm", map[string]any{"order": order})
	assert.Equal(t, http.StatusOK, code, r.Message)
	assert.Equal(t, "confirmed", r.Status)
	code, r = c.post("/confirm", map[string]any{"order": order})
	assert.Equal(t, http.StatusOK, code, "a retried payment learns that it paid")
	assert.Equal(t, "already_confirmed", r.Status)
	code, r = c.post("/cancel", map[string]any{"order": order})
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "confirmed", r.Status)
	s, h = c.stockOf(held)
	assert.Equal(t, [2]int64{1, 0}, [2]int64{s, h}, "2 sold, none held")
	stop() // the syncer stops with the service
}
