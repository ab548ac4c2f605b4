// Package inventorytest is the conformance suite for [inventory.StockManager]
// and [inventory.OrderManager].
//
// Every strategy of this module runs it from its own tests, and a third-party
// strategy can run it the same way: a few lines that say how to make a fresh
// manager, then one call to [Run].
//
//	func TestConformance(t *testing.T) {
//		inventorytest.Run(t, inventorytest.Config{
//			NewManager: func(t *testing.T) inventory.StockManager {
//				return mystrategy.New(client) // release resources with t.Cleanup
//			},
//		})
//	}
//
// The suite checks every rule of the contract: each call's semantics, bad
// input (refused, and refused without writing anything: not the SKU named,
// nor a cleaned-up copy of it, trimmed, cut short, case-folded or
// normalised, which the suite seeds and checks), odd but valid SKUs, values at MaxStock, cancelled contexts,
// idempotency keys, and concurrency: thousands of buyers on little stock,
// Reduce/Return mixes and several SKUs selling out at once, each checked
// against the invariant initial - final == taken - returned and stock never
// below zero. The concurrent subtests are meant to run under the race
// detector (go test -race); each has a deadline (Config.Timeout), and ends
// sooner, saying the manager is stuck, once calls are out and none has
// finished for Config.StallTimeout.
//
// When the manager also implements [inventory.OrderManager] (the suite
// checks with a type assertion, as for any optional interface), Run adds the
// order subtests under "Orders/": all-or-nothing carts, the typed
// [inventory.InsufficientError], idempotency keys of the lines calls, holds
// (Reserve, Confirm, Cancel, Held), their expiry with and without traffic
// (lazy release, Sweep, [inventory.Reap]), Confirm racing expiry, bad input
// refused before any I/O, and 2,000 concurrent carts checked against
// initial - available == sold - returned + held per SKU, plus 200 races of
// Confirm against expiry in which exactly one may win. Set
// Config.RequireOrders for a strategy that must implement it.
//
// When the manager keeps a movement ledger (it implements [ledger.Reader]
// and its Entries does not fail with [ledger.ErrNotKept]), Run adds the
// ledger subtests under "Ledger/": each kind of entry with its key and
// reference, pages from every cursor, bad arguments, and 300 concurrent
// calls (keyed retries, Returns, holds) each with a reference of its own:
// no move without its entry, no entry without its move, and each SKU's
// history replays to the stock read back. [RunLedger] runs that part
// alone; Config.RequireLedger makes Run fail for a manager without one.
//
// Holds that the suite lets expire live for Config.HoldTTL (300ms); a
// backend that measures TTLs on a coarse clock says so with
// Config.ClockResolution, and the suite waits that much longer. The waits
// are generous and the assertions are on outcomes, never on speed.
//
// The order calls' bad input is also tried with a cancelled context: a
// manager must refuse it with [inventory.ErrInvalidArgument] before it looks
// at ctx or its backend, so a call with bad arguments and a cancelled
// context still reports ErrInvalidArgument.
//
// Every subtest makes a fresh manager and uses SKUs, hold ids and
// idempotency keys with a random prefix, so runs sharing a server never see
// each other's data. The order subtests count on nothing else: another
// process sweeping the same holds (a strategy's own reaper, another test
// run) changes no outcome they check.
package inventorytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

// Config says how to make the managers under test and how hard to press them.
type Config struct {
	// NewManager returns a manager for one subtest. It is called once per
	// subtest; release what it opens with t.Cleanup. Managers from
	// successive calls may share a backend: the suite keeps its SKUs apart.
	NewManager func(t *testing.T) inventory.StockManager

	// Buyers is how many goroutines race in the flash sale. The default
	// is 2000, which stays well inside the race detector's goroutine
	// limit.
	Buyers int

	// Carts is how many carts Orders/Carts runs at once. The default is
	// 500: a cart is up to five lines, each a lock turn or a transaction
	// of its own, and 2,000 carts at once on a SQL store outlast the
	// 2-minute bound under -race on 2 cores (callers of a lock strategy
	// queue for the lock and then for the pool's connections, behind the
	// carts that do not hold it). The contract the subtest checks is the
	// same at any size.
	Carts int

	// Stock is the flash sale's stock. The default is 100.
	Stock int64

	// Timeout bounds each concurrent subtest. The default is 2 minutes.
	// The order subtests retry a call that fails with ErrContention, with
	// backoff, until Timeout ends; a strategy whose throughput under
	// contention is low (compare-and-set over SQL) may need a longer one
	// for the carts of Orders/Carts.
	Timeout time.Duration

	// RequireOrders makes Run fail unless the manager also implements
	// [inventory.OrderManager]. Without it, Run tests the order calls of a
	// manager that implements them (found with a type assertion on a
	// manager made for the purpose) and logs that it did not otherwise.
	// Set it for every strategy that claims to take orders, so that a
	// wrapper that hides the methods cannot pass by accident.
	RequireOrders bool

	// RequireLedger makes Run fail unless the manager keeps a movement
	// ledger (it implements [ledger.Reader] and its Entries does not fail
	// with [ledger.ErrNotKept]). Without it, Run runs the ledger subtests,
	// under "Ledger/", only for a manager that keeps one.
	RequireLedger bool

	// HoldTTL is the TTL of the holds the order subtests let expire; the
	// other holds live for Timeout, at least a minute. The default is
	// 300ms. A backend whose clock is coarse sets ClockResolution rather
	// than a longer HoldTTL.
	HoldTTL time.Duration

	// ClockResolution is the resolution of the clock on which the backend
	// measures a hold's TTL: 0 (the default) for microsecond clocks such
	// as Redis TIME or SQL NOW(6), time.Second for a DATETIME or TIMESTAMP
	// column without fractional seconds. The suite counts a hold as
	// expired only once its TTL plus ClockResolution (plus a margin of
	// 25ms for the time between the backend's clock and the client's
	// reading of its own) has passed since Reserve returned, and the
	// Confirm-versus-expiry races spread their Confirms over that window.
	ClockResolution time.Duration

	// ExpirySlack is how long past a documented bound the suite waits for
	// a release before it calls the release late: the Reap subtest expects
	// a hold released within its TTL + ClockResolution + the Reap period
	// + ExpirySlack. The default is 3s, generous on purpose: the suite
	// checks outcomes, not speed, on machines that may be loaded.
	ExpirySlack time.Duration

	// ReapPeriod is the period the Reap subtest gives [inventory.Reap].
	// The default is 100ms.
	ReapPeriod time.Duration

	// Races is how many Confirm-versus-expiry races the suite runs. The
	// default is 200.
	Races int

	// StallTimeout is how long a concurrent subtest of the StockManager
	// calls (the flash sales, the Reduce/Return mix, ConcurrentSameKey)
	// waits while calls are out and none of them finishes (returns
	// anything but ErrContention, which the suite retries) before it calls
	// the manager stuck: it fails, saying how many calls are out and how
	// many ErrContention retries came meanwhile, and cancels the calls'
	// context rather than wait out Timeout. The default is 15s: a healthy
	// manager finishes some call far more often, however loaded the
	// machine.
	StallTimeout time.Duration

	// RemainingNotLinearizable declares, for a manager whose remaining
	// values cannot be linearizable (stock split over segments that
	// concurrent calls update apart, see package segment), that the
	// remaining value a successful Reduce returns is only bounded: at
	// least 0 and at most the stock before the call, exact when no call
	// overlaps it. FlashSale then checks those bounds rather than that
	// the successful Reduces returned each of 0..stock-1 once. Every
	// other check holds as for any manager: no oversell, exactly the
	// stock sold, a refusal only when the stock cannot fit the call, the
	// remaining value of a refusal, of a duplicate and of sequential
	// calls exact, Get exact. The default, false, is a linearizable
	// remaining value: the flash sale's successful Reduces return each of
	// 0..stock-1 exactly once.
	RemainingNotLinearizable bool
}

func (c *Config) defaults() {
	if c.Buyers <= 0 {
		c.Buyers = 2000
	}
	if c.Carts <= 0 {
		c.Carts = 500
	}
	if c.Stock <= 0 {
		c.Stock = 100
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.HoldTTL <= 0 {
		c.HoldTTL = 300 * time.Millisecond
	}
	c.HoldTTL = min(max(c.HoldTTL, inventory.MinHoldTTL), inventory.MaxHoldTTL)
	if c.ClockResolution < 0 {
		c.ClockResolution = 0
	}
	if c.ExpirySlack <= 0 {
		c.ExpirySlack = 3 * time.Second
	}
	if c.ReapPeriod <= 0 {
		c.ReapPeriod = 100 * time.Millisecond
	}
	if c.Races <= 0 {
		c.Races = 200
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = 15 * time.Second
	}
}

// Run runs the conformance suite as subtests of t: the StockManager subtests,
// then, if the manager implements [inventory.OrderManager], the order
// subtests under "Orders". To find out, Run makes one extra manager with
// NewManager(t) and asserts its type; without RequireOrders, a manager
// that does not implement OrderManager gets a log line saying the order
// subtests did not run.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.NewManager == nil {
		t.Fatal("inventorytest: Config.NewManager is nil")
	}
	cfg.defaults()
	s := &suite{cfg: cfg, prefix: randomPrefix()}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, inventory.StockManager)
	}{
		{"InitGet", s.testInitGet},
		{"GetUnknown", s.testGetUnknown},
		{"Reduce", s.testReduce},
		{"ReduceInsufficient", s.testReduceInsufficient},
		{"ReduceUnknown", s.testReduceUnknown},
		{"Return", s.testReturn},
		{"ReturnUnknown", s.testReturnUnknown},
		{"ReturnOverflow", s.testReturnOverflow},
		{"MaxStock", s.testMaxStock},
		{"InvalidArguments", s.testInvalidArguments},
		{"OddSKUs", s.testOddSKUs},
		{"DistinctSKUs", s.testDistinctSKUs},
		{"CancelledContext", s.testCancelledContext},
		{"IdempotentReduce", s.testIdempotentReduce},
		{"IdempotentReturn", s.testIdempotentReturn},
		{"IdempotencyScope", s.testIdempotencyScope},
		{"FailedCallKeepsKey", s.testFailedCallKeepsKey},
		{"ConcurrentSameKey", s.testConcurrentSameKey},
		{"FlashSale", s.testFlashSale},
		{"FlashSaleMultiUnit", s.testFlashSaleMultiUnit},
		{"ReduceReturnMix", s.testReduceReturnMix},
		{"ManySKUsSellOut", s.testManySKUs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, cfg.NewManager(t))
		})
	}
	s.runOrders(t)
	s.runLedger(t)
}

type suite struct {
	cfg    Config
	prefix string
}

func randomPrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "it" + hex.EncodeToString(b) + "-"
}

// sku returns a SKU unique to this run and subtest.
func (s *suite) sku(t *testing.T, name string) string {
	sub := t.Name()
	if i := strings.LastIndexByte(sub, '/'); i >= 0 {
		sub = sub[i+1:]
	}
	return s.prefix + sub + "/" + name
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// quick is the context of the one-call subtests.
func quick(t *testing.T) context.Context { return ctxFor(t, 30*time.Second) }

func mustInit(t *testing.T, ctx context.Context, m inventory.StockManager, sku string, qty int64) {
	t.Helper()
	require.NoError(t, m.Init(ctx, sku, qty), "Init(%q, %d)", sku, qty)
}

func requireStock(t *testing.T, ctx context.Context, m inventory.StockManager, sku string, want int64) {
	t.Helper()
	got, err := m.Get(ctx, sku)
	require.NoError(t, err, "Get(%q)", sku)
	require.Equal(t, want, got, "stock of %q", sku)
}

func (s *suite) testInitGet(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 10)
	requireStock(t, ctx, m, sku, 10)
	mustInit(t, ctx, m, sku, 3) // Init overwrites
	requireStock(t, ctx, m, sku, 3)
	mustInit(t, ctx, m, sku, 0)
	requireStock(t, ctx, m, sku, 0)
	_, err := m.Reduce(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock, "Reduce on a SKU initialised to 0")
}

func (s *suite) testGetUnknown(t *testing.T, m inventory.StockManager) {
	_, err := m.Get(quick(t), s.sku(t, "never-initialised"))
	require.ErrorIs(t, err, inventory.ErrNotFound)
}

func (s *suite) testReduce(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 10)
	rem, err := m.Reduce(ctx, sku, 3)
	require.NoError(t, err)
	require.EqualValues(t, 7, rem)
	rem, err = m.Reduce(ctx, sku, 7)
	require.NoError(t, err)
	require.EqualValues(t, 0, rem)
	requireStock(t, ctx, m, sku, 0)
}

func (s *suite) testReduceInsufficient(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 5)
	rem, err := m.Reduce(ctx, sku, 6)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.EqualValues(t, 5, rem, "Reduce returns the remaining stock with ErrInsufficientStock")
	requireStock(t, ctx, m, sku, 5)
	rem, err = m.Reduce(ctx, sku, inventory.MaxStock)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.EqualValues(t, 5, rem)
	requireStock(t, ctx, m, sku, 5)
}

func (s *suite) testReduceUnknown(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "never-initialised")
	_, err := m.Reduce(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrNotFound)
	require.NotErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Get(ctx, sku)
	require.ErrorIs(t, err, inventory.ErrNotFound, "a failed Reduce must not create the SKU")
}

func (s *suite) testReturn(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 0)
	rem, err := m.Return(ctx, sku, 4)
	require.NoError(t, err)
	require.EqualValues(t, 4, rem)
	rem, err = m.Return(ctx, sku, 1)
	require.NoError(t, err)
	require.EqualValues(t, 5, rem)
	requireStock(t, ctx, m, sku, 5)
}

func (s *suite) testReturnUnknown(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "never-initialised")
	_, err := m.Return(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrNotFound)
	_, err = m.Get(ctx, sku)
	require.ErrorIs(t, err, inventory.ErrNotFound, "a failed Return must not create the SKU")
}

func (s *suite) testReturnOverflow(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, inventory.MaxStock-2)
	_, err := m.Return(ctx, sku, 3)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "Return past MaxStock")
	requireStock(t, ctx, m, sku, inventory.MaxStock-2)
	_, err = m.Return(ctx, sku, inventory.MaxStock)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "Return of MaxStock onto a full SKU")
	requireStock(t, ctx, m, sku, inventory.MaxStock-2)
	rem, err := m.Return(ctx, sku, 2)
	require.NoError(t, err, "Return up to exactly MaxStock")
	require.Equal(t, inventory.MaxStock, rem)
	_, err = m.Return(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	requireStock(t, ctx, m, sku, inventory.MaxStock)
}

func (s *suite) testMaxStock(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, inventory.MaxStock)
	requireStock(t, ctx, m, sku, inventory.MaxStock)
	rem, err := m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	require.Equal(t, inventory.MaxStock-1, rem, "exact below 2^53")
	rem, err = m.Reduce(ctx, sku, inventory.MaxStock-2)
	require.NoError(t, err)
	require.EqualValues(t, 1, rem)
	rem, err = m.Return(ctx, sku, inventory.MaxStock-1)
	require.NoError(t, err)
	require.Equal(t, inventory.MaxStock, rem)
	rem, err = m.Reduce(ctx, sku, inventory.MaxStock)
	require.NoError(t, err)
	require.EqualValues(t, 0, rem)
	requireStock(t, ctx, m, sku, 0)
}

// badSKUs are refused with ErrInvalidArgument by every call: badSKUsOn
// with no base.
func badSKUs() map[string]string { return badSKUsOn("") }

// testInvalidArguments makes every call with every bad SKU, quantity and
// key, and checks after each group of refused calls that nothing changed:
// not the SKU named, and not any other. A manager that cleans a bad SKU up
// (trims it, drops its control characters or invalid bytes, cuts it to
// MaxSKULen, folds its case, normalises it) and writes the result before it
// refuses the call changes a SKU the caller never named: the subtest seeds
// those cleaned-up SKUs (cleanedUp) of one copy of the bad SKUs with known
// stock, leaves those of another copy never initialised, and checks that
// the first keep their stock and the second stay ErrNotFound.
func (s *suite) testInvalidArguments(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	good := s.sku(t, "good")
	mustInit(t, ctx, m, good, 10)
	inv := inventory.ErrInvalidArgument

	// Each bad SKU on a base of its own, so that no two share a variant.
	names := slices.Sorted(maps.Keys(badSKUs()))
	seeded, unseeded := make(map[string]string), make(map[string]string)
	for i, name := range names {
		seeded[name] = badSKUsOn(s.sku(t, fmt.Sprintf("seeded/%d/", i)))[name]
		unseeded[name] = badSKUsOn(s.sku(t, fmt.Sprintf("unseeded/%d/", i)))[name]
	}
	_, seededVariants, how := cleanedSKUs(seeded)
	_, unseededVariants, unseededHow := cleanedSKUs(unseeded)
	maps.Copy(how, unseededHow)
	want := make(map[string]int64) // the seeded variants' stock
	for _, name := range names {
		for _, v := range seededVariants[name] {
			if _, ok := want[v]; !ok {
				want[v] = int64(1000 + len(want))
				mustInit(t, ctx, m, v, want[v])
			}
		}
	}
	// unchanged checks that the refused calls on the bad SKUs named
	// changed nothing: good and the variants keep their stock, the
	// unseeded variants stay unknown.
	unchanged := func(t *testing.T, after string, names ...string) {
		t.Helper()
		requireStock(t, ctx, m, good, 10)
		for _, name := range names {
			for _, v := range seededVariants[name] {
				got, err := m.Get(ctx, v)
				require.NoError(t, err, "Get(%q)", v)
				require.Equal(t, want[v], got,
					"%s: the stock of %q (%s) changed: the manager wrote a cleaned-up copy of a SKU it refused", after, v, how[v])
			}
			for _, v := range unseededVariants[name] {
				got, err := m.Get(ctx, v)
				require.ErrorIs(t, err, inventory.ErrNotFound,
					"%s: %q (%s) exists with stock %d: the manager created a cleaned-up copy of a SKU it refused", after, v, how[v], got)
			}
		}
	}

	for _, name := range names {
		t.Run("sku "+name, func(t *testing.T) {
			for _, bad := range []string{seeded[name], unseeded[name]} {
				require.ErrorIs(t, m.Init(ctx, bad, 1), inv, "Init")
				_, err := m.Reduce(ctx, bad, 1)
				require.ErrorIs(t, err, inv, "Reduce")
				_, err = m.Return(ctx, bad, 1)
				require.ErrorIs(t, err, inv, "Return")
				_, err = m.Reduce(ctx, bad, 1, inventory.WithKey("k"))
				require.ErrorIs(t, err, inv, "keyed Reduce")
				_, err = m.Get(ctx, bad)
				require.ErrorIs(t, err, inv, "Get")
			}
			unchanged(t, "after Init, Reduce, Return and Get of the bad SKU "+name, name)
		})
	}
	for _, q := range []int64{0, -1, inventory.MaxStock + 1, math.MaxInt64, math.MinInt64} {
		t.Run(fmt.Sprintf("quantity %d", q), func(t *testing.T) {
			_, err := m.Reduce(ctx, good, q)
			require.ErrorIs(t, err, inv, "Reduce")
			_, err = m.Return(ctx, good, q)
			require.ErrorIs(t, err, inv, "Return")
			requireStock(t, ctx, m, good, 10)
		})
	}
	for _, q := range []int64{-1, inventory.MaxStock + 1, math.MaxInt64, math.MinInt64} {
		t.Run(fmt.Sprintf("init %d", q), func(t *testing.T) {
			require.ErrorIs(t, m.Init(ctx, good, q), inv)
			requireStock(t, ctx, m, good, 10)
		})
	}
	for name, key := range map[string]string{
		"empty key": "", "256-byte key": strings.Repeat("k", 256),
		"invalid UTF-8 key": "k\xff", "control key": "k\x00",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := m.Reduce(ctx, good, 1, inventory.WithKey(key))
			require.ErrorIs(t, err, inv, "Reduce")
			_, err = m.Return(ctx, good, 1, inventory.WithKey(key))
			require.ErrorIs(t, err, inv, "Return")
			requireStock(t, ctx, m, good, 10)
		})
	}
	// The refused calls created nothing: an unknown valid SKU stays unknown.
	unknown := s.sku(t, "unknown")
	_, err := m.Reduce(ctx, unknown, 0)
	require.ErrorIs(t, err, inv)
	_, err = m.Get(ctx, unknown)
	require.ErrorIs(t, err, inventory.ErrNotFound)
	// And, once every call was made, no SKU changed.
	unchanged(t, "after every refused call", names...)
}

// oddSKUs are valid SKUs that tend to break naive backends: each must work
// as a plain, byte-exact id. The prefix is added by the caller.
func oddSKUs() []string {
	return []string{
		"plain",
		"with space", " leading", "trailing ", "trailing", "TRAILING",
		"'; DROP TABLE stock; --", `" OR "1"="1`, "`backtick`", "a'b\"c",
		"{tag}", "}{", "{", "}", "{}", "a{b}c{d}",
		"redis.call('FLUSHALL')", "]] .. os.exit() --[[", "%s%d%x", "?", "$1", ":name", "@var",
		`back\slash`, `\\`, "*", "[a-z]", "../../etc/passwd", "a:b:c", "#hash",
		"鞋子-42", "靴子", "👟 sneaker", "e\u0301", "\u00e9", // NFD and NFC é
		"ǅ", "ß", "SS", "ﬁ", "fi", "İ", "i̇",
		"\u200b zero width", "\ufeffbom", "\u00a0nbsp",
	}
}

func (s *suite) testOddSKUs(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	skus := make([]string, 0, 64)
	for _, o := range oddSKUs() {
		skus = append(skus, s.sku(t, o))
	}
	// SKUs of exactly MaxSKULen bytes, ASCII and multi-byte.
	base := s.sku(t, "")
	skus = append(skus, base+strings.Repeat("x", inventory.MaxSKULen-len(base)))
	n := (inventory.MaxSKULen - len(base)) / 3
	long := base + strings.Repeat("鞋", n) + strings.Repeat("y", inventory.MaxSKULen-len(base)-3*n)
	require.Len(t, long, inventory.MaxSKULen)
	skus = append(skus, long)

	for i, sku := range skus {
		mustInit(t, ctx, m, sku, int64(100+i))
	}
	for i, sku := range skus {
		requireStock(t, ctx, m, sku, int64(100+i))
	}
	// Reduce each by its index+1 and return 1: every SKU moves on its own.
	for i, sku := range skus {
		rem, err := m.Reduce(ctx, sku, int64(i+1))
		require.NoError(t, err, "Reduce(%q)", sku)
		require.EqualValues(t, 99, rem, "Reduce(%q)", sku)
		rem, err = m.Return(ctx, sku, 1, inventory.WithKey(sku))
		require.NoError(t, err, "Return(%q) with the SKU as key", sku)
		require.EqualValues(t, 100, rem, "Return(%q)", sku)
	}
	for _, sku := range skus {
		requireStock(t, ctx, m, sku, 100)
	}
}

func (s *suite) testDistinctSKUs(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	// Each group holds SKUs that a careless backend folds together.
	for _, group := range [][]string{
		{"abc", "ABC", "Abc"},
		{"pad", "pad ", "pad  "},
		{"\u00e9", "e\u0301"},
		{"ß", "ss", "SS"},
		{"a", "a\u200b"},
		{"k", "K", "\u212a"}, // KELVIN SIGN
	} {
		for i, g := range group {
			mustInit(t, ctx, m, s.sku(t, g), int64(i+1))
		}
		for i, g := range group {
			requireStock(t, ctx, m, s.sku(t, g), int64(i+1))
		}
		_, err := m.Reduce(ctx, s.sku(t, group[0]), 1)
		require.NoError(t, err)
		requireStock(t, ctx, m, s.sku(t, group[0]), 0)
		for i, g := range group[1:] {
			requireStock(t, ctx, m, s.sku(t, g), int64(i+2))
		}
	}
}

func (s *suite) testCancelledContext(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 10)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := m.Reduce(cancelled, sku, 1)
	require.ErrorIs(t, err, context.Canceled, "Reduce with a cancelled context")
	require.NotErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Reduce(cancelled, sku, 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, context.Canceled, "keyed Reduce with a cancelled context")
	_, err = m.Return(cancelled, sku, 1)
	require.ErrorIs(t, err, context.Canceled, "Return with a cancelled context")
	require.ErrorIs(t, m.Init(cancelled, sku, 99), context.Canceled, "Init with a cancelled context")
	_, err = m.Get(cancelled, sku)
	require.ErrorIs(t, err, context.Canceled, "Get with a cancelled context")

	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	_, err = m.Reduce(expired, sku, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Reduce past its deadline")

	requireStock(t, ctx, m, sku, 10)
	// The keyed call that failed did not use up its key.
	rem, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
	require.NoError(t, err)
	require.EqualValues(t, 9, rem)
}

func (s *suite) testIdempotentReduce(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 10)
	rem, err := m.Reduce(ctx, sku, 3, inventory.WithKey("order-1"))
	require.NoError(t, err)
	require.EqualValues(t, 7, rem)
	for range 3 {
		rem, err = m.Reduce(ctx, sku, 3, inventory.WithKey("order-1"))
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.EqualValues(t, 7, rem, "a duplicate returns the first call's remaining")
	}
	requireStock(t, ctx, m, sku, 7)
	// Another key takes effect, and the first key still reports its own result.
	rem, err = m.Reduce(ctx, sku, 2, inventory.WithKey("order-2"))
	require.NoError(t, err)
	require.EqualValues(t, 5, rem)
	rem, err = m.Reduce(ctx, sku, 3, inventory.WithKey("order-1"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	require.EqualValues(t, 7, rem)
	// Calls without a key are never duplicates.
	_, err = m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	_, err = m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	requireStock(t, ctx, m, sku, 3)
}

func (s *suite) testIdempotentReturn(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 1)
	rem, err := m.Return(ctx, sku, 4, inventory.WithKey("refund-1"))
	require.NoError(t, err)
	require.EqualValues(t, 5, rem)
	rem, err = m.Return(ctx, sku, 4, inventory.WithKey("refund-1"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	require.EqualValues(t, 5, rem)
	requireStock(t, ctx, m, sku, 5)
}

func (s *suite) testIdempotencyScope(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	a, b := s.sku(t, "a"), s.sku(t, "b")
	mustInit(t, ctx, m, a, 10)
	mustInit(t, ctx, m, b, 10)
	const key = "shared-key"
	// The same key on another SKU is another call.
	_, err := m.Reduce(ctx, a, 1, inventory.WithKey(key))
	require.NoError(t, err)
	rem, err := m.Reduce(ctx, b, 2, inventory.WithKey(key))
	require.NoError(t, err, "same key, other SKU")
	require.EqualValues(t, 8, rem)
	// The same key in the other direction is another call.
	rem, err = m.Return(ctx, a, 5, inventory.WithKey(key))
	require.NoError(t, err, "same key, other direction")
	require.EqualValues(t, 14, rem)
	// Keys are byte-exact too.
	rem, err = m.Reduce(ctx, a, 1, inventory.WithKey(key+" "))
	require.NoError(t, err, "key with a trailing space is another key")
	require.EqualValues(t, 13, rem)
	rem, err = m.Reduce(ctx, a, 1, inventory.WithKey(strings.ToUpper(key)))
	require.NoError(t, err, "upper-case key is another key")
	require.EqualValues(t, 12, rem)
	// Hostile keys are data.
	for _, k := range []string{"'; DELETE FROM ledger; --", "{x}", "鍵", "a:b"} {
		_, err = m.Reduce(ctx, a, 1, inventory.WithKey(k))
		require.NoError(t, err, "key %q", k)
		_, err = m.Reduce(ctx, a, 1, inventory.WithKey(k))
		require.ErrorIs(t, err, inventory.ErrDuplicate, "key %q", k)
	}
	requireStock(t, ctx, m, a, 8)
	requireStock(t, ctx, m, b, 8)
}

func (s *suite) testFailedCallKeepsKey(t *testing.T, m inventory.StockManager) {
	ctx := quick(t)
	sku := s.sku(t, "a")
	unknown := s.sku(t, "unknown")
	mustInit(t, ctx, m, sku, 1)
	_, err := m.Reduce(ctx, sku, 5, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Reduce(ctx, unknown, 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrNotFound)
	mustInit(t, ctx, m, sku, inventory.MaxStock)
	_, err = m.Return(ctx, sku, 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)

	mustInit(t, ctx, m, sku, 10)
	rem, err := m.Reduce(ctx, sku, 5, inventory.WithKey("k"))
	require.NoError(t, err, "the failed Reduce did not use up its key")
	require.EqualValues(t, 5, rem)
	rem, err = m.Return(ctx, sku, 1, inventory.WithKey("k"))
	require.NoError(t, err, "the failed Return did not use up its key")
	require.EqualValues(t, 6, rem)
	mustInit(t, ctx, m, unknown, 3)
	rem, err = m.Reduce(ctx, unknown, 1, inventory.WithKey("k"))
	require.NoError(t, err, "the Reduce on an unknown SKU did not use up its key")
	require.EqualValues(t, 2, rem)
}

// noOversell fails t, naming the oversell, when calls that took effect
// took more units than the stock had, or the stock of sku is below zero.
func noOversell(t *testing.T, ctx context.Context, m inventory.StockManager, sku string, stock, sold int64) {
	t.Helper()
	got, err := m.Get(ctx, sku)
	require.NoError(t, err, "Get(%q)", sku)
	if sold > stock || got < 0 {
		t.Fatalf("oversold %q: the successful calls took %d units of %d in stock, and %d are left", sku, sold, stock, got)
	}
}

// tally counts the outcomes of concurrent calls.
type tally struct {
	w            *watchdog // nil: none
	mu           sync.Mutex
	ok           int64 // successful calls
	units        int64 // units they moved
	insufficient int64
	duplicate    int64
	contention   int64 // attempts that gave up and were retried
	negative     []int64
	remaining    []int64 // remaining values of successful calls
	unexpected   []error
	latencies    []time.Duration
}

func (tl *tally) report(t *testing.T) {
	t.Helper()
	assert.Empty(t, tl.negative, "oversold: calls returned negative remaining stock")
	if len(tl.unexpected) > 0 {
		t.Errorf("%d calls failed unexpectedly; first: %v", len(tl.unexpected), tl.unexpected[0])
	}
}

// call runs op, retrying while it reports ErrContention, and records the
// outcome. It returns op's final result.
func (tl *tally) call(ctx context.Context, qty int64, op func() (int64, error)) (int64, error) {
	start := time.Now()
	tl.w.begin()
	defer tl.w.end()
	var rem int64
	var err error
	for {
		rem, err = op()
		if !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
			break
		}
		tl.w.retried()
		tl.mu.Lock()
		tl.contention++
		tl.mu.Unlock()
	}
	elapsed := time.Since(start)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.latencies = append(tl.latencies, elapsed)
	switch {
	case err == nil:
		tl.ok++
		tl.units += qty
		tl.remaining = append(tl.remaining, rem)
		if rem < 0 {
			tl.negative = append(tl.negative, rem)
		}
	case errors.Is(err, inventory.ErrInsufficientStock):
		tl.insufficient++
	case errors.Is(err, inventory.ErrDuplicate):
		tl.duplicate++
	default:
		tl.unexpected = append(tl.unexpected, err)
	}
	return rem, err
}

// watchdog ends a concurrent subtest whose calls stopped finishing: see
// Config.StallTimeout. Its methods do nothing on a nil watchdog.
type watchdog struct {
	out, retries atomic.Int64 // calls out; ErrContention retries
	last         atomic.Int64 // when a call last began or finished, Unix ns
	lastRetries  atomic.Int64 // retries then
}

func (w *watchdog) begin() {
	if w != nil {
		w.out.Add(1)
		w.moved()
	}
}

func (w *watchdog) end() {
	if w != nil {
		w.out.Add(-1)
		w.moved()
	}
}

func (w *watchdog) moved() {
	w.lastRetries.Store(w.retries.Load())
	w.last.Store(time.Now().UnixNano())
}

func (w *watchdog) retried() {
	if w != nil {
		w.retries.Add(1)
	}
}

// errStalled is the cause of a concurrent subtest's context cancelled by
// its watchdog.
var errStalled = errors.New("inventorytest: no call finished within Config.StallTimeout: the manager is stuck")

// concurrent returns the context of a concurrent subtest, which ends after
// Timeout, or once calls are out and none has finished for StallTimeout
// (the subtest then fails, saying so), and the watchdog its tallies report
// to.
func (s *suite) concurrent(t *testing.T) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancelCause(ctxFor(t, s.cfg.Timeout))
	w := &watchdog{}
	w.moved()
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		cancel(nil)
	})
	stall := s.cfg.StallTimeout
	wg.Go(func() {
		tick := time.NewTicker(min(stall/10, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if w.out.Load() == 0 {
				w.moved() // between calls: nothing is stuck
				continue
			}
			if idle := time.Since(time.Unix(0, w.last.Load())); idle >= stall {
				t.Errorf("stuck: no call finished for %v (Config.StallTimeout) while %d calls were out, "+
					"with %d ErrContention retries meanwhile: a call that never returns, or a manager that never stops "+
					"reporting ErrContention; cancelling the calls",
					idle.Round(time.Millisecond), w.out.Load(), w.retries.Load()-w.lastRetries.Load())
				cancel(errStalled)
				return
			}
		}
	})
	return ctx, w
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// start runs n goroutines of fn behind one starting gun and waits for them.
func start(n int, fn func(i int)) time.Duration {
	var ready, done sync.WaitGroup
	gun := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-gun
			fn(i)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(gun)
	done.Wait()
	return time.Since(t0)
}

func (s *suite) testConcurrentSameKey(t *testing.T, m inventory.StockManager) {
	ctx, w := s.concurrent(t)
	sku := s.sku(t, "a")
	mustInit(t, ctx, m, sku, 100)
	tl := tally{w: w}
	var firstRem atomic.Int64
	firstRem.Store(-1)
	dupRems := make([]int64, 200)
	start(200, func(i int) {
		rem, err := tl.call(ctx, 1, func() (int64, error) {
			return m.Reduce(ctx, sku, 1, inventory.WithKey("the-one-key"))
		})
		dupRems[i] = -1
		if err == nil {
			firstRem.Store(rem)
		} else if errors.Is(err, inventory.ErrDuplicate) {
			dupRems[i] = rem
		}
	})
	tl.report(t)
	require.EqualValues(t, 1, tl.ok, "exactly one of 200 calls with one key takes effect (duplicates %d)", tl.duplicate)
	require.EqualValues(t, 199, tl.duplicate, "the other 199 report ErrDuplicate")
	requireStock(t, ctx, m, sku, 99)
	for i, r := range dupRems {
		if r != -1 {
			require.EqualValues(t, 99, r, "duplicate %d returns the first call's remaining", i)
		}
	}
}

func (s *suite) logSale(t *testing.T, what string, buyers int, elapsed time.Duration, tl *tally) {
	t.Logf("%s: %d buyers, sold %d (%d units), refused %d insufficient, %d duplicate; %d contention retries; %v, %.0f calls/s, latency p50 %v p99 %v",
		what, buyers, tl.ok, tl.units, tl.insufficient, tl.duplicate, tl.contention,
		elapsed.Round(time.Millisecond), float64(buyers)/elapsed.Seconds(),
		percentile(tl.latencies, 0.5).Round(time.Microsecond), percentile(tl.latencies, 0.99).Round(time.Microsecond))
}

func (s *suite) testFlashSale(t *testing.T, m inventory.StockManager) {
	ctx, w := s.concurrent(t)
	sku := s.sku(t, "hot-shoe")
	stock := s.cfg.Stock
	mustInit(t, ctx, m, sku, stock)
	tl := tally{w: w}
	elapsed := start(s.cfg.Buyers, func(i int) {
		_, _ = tl.call(ctx, 1, func() (int64, error) {
			return m.Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprintf("buyer-%d", i)))
		})
	})
	s.logSale(t, "flash sale", s.cfg.Buyers, elapsed, &tl)
	tl.report(t)
	noOversell(t, ctx, m, sku, stock, tl.units)
	require.Equal(t, stock, tl.ok, "exactly the stock is sold")
	require.EqualValues(t, int64(s.cfg.Buyers)-stock, tl.insufficient, "every other buyer is told the stock ran out")
	requireStock(t, ctx, m, sku, 0)
	if s.cfg.RemainingNotLinearizable {
		for _, r := range tl.remaining {
			require.True(t, r >= 0 && r < stock, "a successful Reduce returned remaining %d, outside 0..%d", r, stock-1)
		}
		return
	}
	// Linearizable: the successful calls saw every remaining value once.
	slices.Sort(tl.remaining)
	for i, r := range tl.remaining {
		require.EqualValues(t, i, r, "successful Reduces must return each of 0..stock-1 exactly once")
	}
}

func (s *suite) testFlashSaleMultiUnit(t *testing.T, m inventory.StockManager) {
	ctx, w := s.concurrent(t)
	sku := s.sku(t, "bundle")
	const stock = 97
	mustInit(t, ctx, m, sku, stock)
	buyers := min(s.cfg.Buyers, 500)
	tl := tally{w: w}
	elapsed := start(buyers, func(i int) {
		qty := int64(1 + i%3)
		_, _ = tl.call(ctx, qty, func() (int64, error) { return m.Reduce(ctx, sku, qty) })
	})
	s.logSale(t, "multi-unit sale", buyers, elapsed, &tl)
	tl.report(t)
	got, err := m.Get(ctx, sku)
	require.NoError(t, err)
	noOversell(t, ctx, m, sku, stock, tl.units)
	require.Equal(t, int64(stock)-tl.units, got, "initial - final == units taken")
	require.EqualValues(t, buyers, tl.ok+tl.insufficient, "every buyer either bought or was refused")
}

func (s *suite) testReduceReturnMix(t *testing.T, m inventory.StockManager) {
	ctx, w := s.concurrent(t)
	sku := s.sku(t, "churn")
	const initial = 40
	mustInit(t, ctx, m, sku, initial)
	taken, returned := tally{w: w}, tally{w: w}
	const workers, ops = 50, 20
	start(workers, func(w int) {
		rng := mrand.New(mrand.NewPCG(uint64(w), 7))
		for range ops {
			qty := int64(1 + rng.IntN(4))
			if rng.IntN(2) == 0 {
				_, _ = taken.call(ctx, qty, func() (int64, error) { return m.Reduce(ctx, sku, qty) })
			} else {
				_, _ = returned.call(ctx, qty, func() (int64, error) { return m.Return(ctx, sku, qty) })
			}
		}
	})
	taken.report(t)
	returned.report(t)
	final, err := m.Get(ctx, sku)
	require.NoError(t, err)
	t.Logf("reduce/return mix: %d reduces took %d units, %d returns gave %d back, %d refused; final %d",
		taken.ok, taken.units, returned.ok, returned.units, taken.insufficient, final)
	require.GreaterOrEqual(t, final, int64(0))
	require.Equal(t, initial-final, taken.units-returned.units, "initial - final == taken - returned")
	require.EqualValues(t, workers*ops, taken.ok+taken.insufficient+returned.ok, "every call either took effect or was refused")
}

func (s *suite) testManySKUs(t *testing.T, m inventory.StockManager) {
	ctx, w := s.concurrent(t)
	const nSKU, stock = 8, 25
	skus := make([]string, nSKU)
	for i := range skus {
		skus[i] = s.sku(t, fmt.Sprintf("sku-%d", i))
		mustInit(t, ctx, m, skus[i], stock)
	}
	bystander := s.sku(t, "bystander")
	mustInit(t, ctx, m, bystander, 1000)
	buyers := min(s.cfg.Buyers, 800)
	tallies := make([]tally, nSKU)
	for k := range tallies {
		tallies[k].w = w
	}
	elapsed := start(buyers, func(i int) {
		k := i % nSKU
		_, _ = tallies[k].call(ctx, 1, func() (int64, error) { return m.Reduce(ctx, skus[k], 1) })
	})
	t.Logf("%d SKUs, %d buyers: %v", nSKU, buyers, elapsed.Round(time.Millisecond))
	for k := range tallies {
		tallies[k].report(t)
		noOversell(t, ctx, m, skus[k], stock, tallies[k].units)
		assert.EqualValues(t, stock, tallies[k].ok, "SKU %d sells exactly its stock", k)
		requireStock(t, ctx, m, skus[k], 0)
	}
	requireStock(t, ctx, m, bystander, 1000)
}
