package lockmgrtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/lockmgr"
)

// StoreConfig says how to make the Stores under test.
type StoreConfig struct {
	// NewStore returns a Store for one subtest; release what it opens with
	// t.Cleanup. Stores from successive calls may share a backend.
	NewStore func(t *testing.T) lockmgr.Store

	// Writers is how many goroutines race in the concurrent subtests; the
	// default is 50.
	Writers int

	// Timeout bounds each subtest; the default is 2 minutes.
	Timeout time.Duration
}

// RunStore runs the Store conformance suite as subtests of t:
//
//   - InitGet: Init creates and overwrites; Get and Read return it.
//   - NotFound: Get and Read of an unknown SKU wrap [inventory.ErrNotFound];
//     a CompareAndSet on it is refused and creates nothing.
//   - VersionMoves: a write that changes the stock (CompareAndSet or Init)
//     makes the version read before it stale.
//   - StaleVersion: a CompareAndSet on a stale version returns ok false and
//     writes nothing: neither the stock nor the ledger entry.
//   - Ledger: the entry is written with the CompareAndSet, keyed by
//     (sku, dir, key) byte for byte, and holds the new stock.
//   - Duplicate: a CompareAndSet whose key is recorded wraps
//     [inventory.ErrDuplicate] and writes nothing.
//   - ByteExactSKUs: odd SKUs are distinct rows, byte for byte.
//   - MaxStock: [inventory.MaxStock] is stored and read exactly.
//   - CancelledContext: each method with a done ctx fails with an error
//     that wraps ctx.Err().
//   - ConcurrentCAS: Writers goroutines CompareAndSet one version: exactly
//     one wins, and only its ledger entry is written.
//   - ConcurrentSameKey: Writers goroutines read and CompareAndSet with one
//     key until it is recorded: exactly one write takes effect, which only a
//     ledger written in the same atomic step as the stock guarantees.
func RunStore(t *testing.T, cfg StoreConfig) {
	t.Helper()
	if cfg.NewStore == nil {
		t.Fatal("lockmgrtest: StoreConfig.NewStore is nil")
	}
	cfg.Writers = cmp(cfg.Writers, 50)
	cfg.Timeout = cmp(cfg.Timeout, 2*time.Minute)
	runSubtests(t, cfg.Timeout, cfg.NewStore, []subtest[lockmgr.Store]{
		{"InitGet", testInitGet},
		{"NotFound", testNotFound},
		{"VersionMoves", testVersionMoves},
		{"StaleVersion", testStaleVersion},
		{"Ledger", testLedger},
		{"Duplicate", testDuplicate},
		{"ByteExactSKUs", testSKUs},
		{"MaxStock", testMaxStock},
		{"CancelledContext", testStoreCancelled},
		{"ConcurrentCAS", with(cfg.Writers, testConcurrentCAS)},
		{"ConcurrentSameKey", with(cfg.Writers, testConcurrentSameKey)},
	})
}

func mustInit(t *testing.T, ctx context.Context, s lockmgr.Store, sku string, qty int64) {
	t.Helper()
	if err := s.Init(ctx, sku, qty); err != nil {
		t.Fatalf("Init(%q, %d): %v", sku, qty, err)
	}
}

func mustRead(t *testing.T, ctx context.Context, s lockmgr.Store, sku string) (stock, version int64) {
	t.Helper()
	stock, version, err := s.Read(ctx, sku)
	if err != nil {
		t.Fatalf("Read(%q): %v", sku, err)
	}
	n, err := s.Get(ctx, sku)
	if err != nil || n != stock {
		t.Fatalf("Get(%q) = %d, %v; Read said %d", sku, n, err, stock)
	}
	return stock, version
}

func wantStock(t *testing.T, ctx context.Context, s lockmgr.Store, sku string, want int64) {
	t.Helper()
	if got, _ := mustRead(t, ctx, s, sku); got != want {
		t.Errorf("stock of %q = %d, want %d", sku, got, want)
	}
}

func mustCAS(t *testing.T, ctx context.Context, s lockmgr.Store, sku string, version, stock int64, dir driver.Direction, key string) bool {
	t.Helper()
	ok, err := s.CompareAndSet(ctx, sku, version, stock, dir, key)
	if err != nil {
		t.Fatalf("CompareAndSet(%q, version %d, %d, %s, %q): %v", sku, version, stock, dir, key, err)
	}
	return ok
}

// wantSeen checks the ledger entry (sku, dir, key).
func wantSeen(t *testing.T, ctx context.Context, s lockmgr.Store, sku string, dir driver.Direction, key string, want int64, found bool) {
	t.Helper()
	got, ok, err := s.Seen(ctx, sku, dir, key)
	switch {
	case err != nil:
		t.Errorf("Seen(%q, %s, %q): %v", sku, dir, key, err)
	case ok != found:
		t.Errorf("Seen(%q, %s, %q) found = %v, want %v", sku, dir, key, ok, found)
	case found && got != want:
		t.Errorf("Seen(%q, %s, %q) = %d, want %d", sku, dir, key, got, want)
	}
}

func testInitGet(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	wantStock(t, ctx, s, sku, 10)
	mustInit(t, ctx, s, sku, 3)
	wantStock(t, ctx, s, sku, 3)
	mustInit(t, ctx, s, sku, 0)
	wantStock(t, ctx, s, sku, 0)
}

func testNotFound(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "never"
	if _, err := s.Get(ctx, sku); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Get of an unknown SKU: err = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Read(ctx, sku); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Read of an unknown SKU: err = %v, want ErrNotFound", err)
	}
	for _, v := range []int64{0, 1} {
		ok, err := s.CompareAndSet(ctx, sku, v, 5, driver.DirReturn, "")
		if ok && err == nil {
			t.Errorf("CompareAndSet of an unknown SKU at version %d succeeded", v)
		}
	}
	if _, err := s.Get(ctx, sku); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Get after a CompareAndSet of an unknown SKU: err = %v, want ErrNotFound", err)
	}
}

func testVersionMoves(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	_, v0 := mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v0, 7, driver.DirReduce, "") {
		t.Fatal("CompareAndSet at the version just read was refused")
	}
	_, v1 := mustRead(t, ctx, s, sku)
	if mustCAS(t, ctx, s, sku, v0, 1, driver.DirReduce, "") {
		t.Error("CompareAndSet at the version read before a CompareAndSet succeeded")
	}
	mustInit(t, ctx, s, sku, 20)
	if mustCAS(t, ctx, s, sku, v1, 1, driver.DirReduce, "") {
		t.Error("CompareAndSet at the version read before an Init succeeded")
	}
	wantStock(t, ctx, s, sku, 20)
}

func testStaleVersion(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	_, v := mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v, 8, driver.DirReduce, "k1") {
		t.Fatal("CompareAndSet at the version just read was refused")
	}
	if mustCAS(t, ctx, s, sku, v, 5, driver.DirReduce, "k2") {
		t.Error("CompareAndSet at a stale version succeeded")
	}
	wantStock(t, ctx, s, sku, 8)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "k2", 0, false)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "k1", 8, true)
}

func testLedger(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku, other := p+"a", p+"b"
	mustInit(t, ctx, s, sku, 10)
	mustInit(t, ctx, s, other, 10)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "Key", 0, false)
	_, v := mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v, 6, driver.DirReduce, "Key") {
		t.Fatal("CompareAndSet at the version just read was refused")
	}
	wantSeen(t, ctx, s, sku, driver.DirReduce, "Key", 6, true)
	for _, k := range []string{"key", "KEY", "Key ", " Key", "Ke"} {
		wantSeen(t, ctx, s, sku, driver.DirReduce, k, 0, false)
	}
	wantSeen(t, ctx, s, sku, driver.DirReturn, "Key", 0, false)
	wantSeen(t, ctx, s, other, driver.DirReduce, "Key", 0, false)
	// The same key in the other direction, or on another SKU, is another
	// entry.
	_, v = mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v, 9, driver.DirReturn, "Key") {
		t.Error("CompareAndSet with a key recorded only for the other direction was refused")
	}
	_, v = mustRead(t, ctx, s, other)
	if !mustCAS(t, ctx, s, other, v, 4, driver.DirReduce, "Key") {
		t.Error("CompareAndSet with a key recorded only for another SKU was refused")
	}
	wantSeen(t, ctx, s, sku, driver.DirReturn, "Key", 9, true)
	wantSeen(t, ctx, s, other, driver.DirReduce, "Key", 4, true)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "Key", 6, true)
}

func testDuplicate(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	_, v := mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v, 7, driver.DirReduce, "k") {
		t.Fatal("CompareAndSet at the version just read was refused")
	}
	_, v = mustRead(t, ctx, s, sku)
	ok, err := s.CompareAndSet(ctx, sku, v, 4, driver.DirReduce, "k")
	if !errors.Is(err, inventory.ErrDuplicate) {
		t.Errorf("CompareAndSet with a recorded key: ok = %v, err = %v, want one that wraps ErrDuplicate", ok, err)
	}
	wantStock(t, ctx, s, sku, 7)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "k", 7, true)
	if !mustCAS(t, ctx, s, sku, v, 5, driver.DirReduce, "") {
		t.Error("the refused duplicate moved the version")
	}
}

func testSKUs(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	for i, n := range names {
		mustInit(t, ctx, s, p+n, int64(i+1))
	}
	for i, n := range names {
		wantStock(t, ctx, s, p+n, int64(i+1))
	}
	for i, n := range names {
		_, v := mustRead(t, ctx, s, p+n)
		if !mustCAS(t, ctx, s, p+n, v, int64(100+i), driver.DirReduce, "k") {
			t.Errorf("CompareAndSet(%q) at the version just read was refused", n)
		}
	}
	for i, n := range names {
		wantStock(t, ctx, s, p+n, int64(100+i))
		wantSeen(t, ctx, s, p+n, driver.DirReduce, "k", int64(100+i), true)
	}
}

func testMaxStock(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, inventory.MaxStock)
	wantStock(t, ctx, s, sku, inventory.MaxStock)
	_, v := mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v, inventory.MaxStock-1, driver.DirReduce, "k") {
		t.Fatal("CompareAndSet at MaxStock refused")
	}
	wantStock(t, ctx, s, sku, inventory.MaxStock-1)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "k", inventory.MaxStock-1, true)
	_, v = mustRead(t, ctx, s, sku)
	if !mustCAS(t, ctx, s, sku, v, inventory.MaxStock, driver.DirReturn, "") {
		t.Fatal("CompareAndSet back to MaxStock refused")
	}
	wantStock(t, ctx, s, sku, inventory.MaxStock)
}

func testStoreCancelled(t *testing.T, ctx context.Context, s lockmgr.Store, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	_, v := mustRead(t, ctx, s, sku)
	done, cancel := context.WithCancel(ctx)
	cancel()
	check := func(what string, err error) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled ctx: err = %v, want one that wraps context.Canceled", what, err)
		}
	}
	check("Init", s.Init(done, sku, 3))
	_, err := s.Get(done, sku)
	check("Get", err)
	_, _, err = s.Read(done, sku)
	check("Read", err)
	_, _, err = s.Seen(done, sku, driver.DirReduce, "k")
	check("Seen", err)
	_, err = s.CompareAndSet(done, sku, v, 1, driver.DirReduce, "k")
	check("CompareAndSet", err)
	wantStock(t, ctx, s, sku, 10)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "k", 0, false)
}

func testConcurrentCAS(t *testing.T, ctx context.Context, s lockmgr.Store, p string, writers int) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, inventory.MaxStock)
	_, v := mustRead(t, ctx, s, sku)
	var (
		wins   atomic.Int64
		winner atomic.Int64
		wg     sync.WaitGroup
	)
	for i := range writers {
		wg.Go(func() {
			ok, err := s.CompareAndSet(ctx, sku, v, int64(i), driver.DirReduce, fmt.Sprint("k", i))
			if err != nil {
				t.Errorf("CompareAndSet: %v", err)
			}
			if ok {
				wins.Add(1)
				winner.Store(int64(i))
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of %d CompareAndSets on one version succeeded, want exactly 1", n, writers)
	}
	w := winner.Load()
	wantStock(t, ctx, s, sku, w)
	for i := range writers {
		wantSeen(t, ctx, s, sku, driver.DirReduce, fmt.Sprint("k", i), int64(i), int64(i) == w)
	}
}

func testConcurrentSameKey(t *testing.T, ctx context.Context, s lockmgr.Store, p string, writers int) {
	sku := p + "a"
	const start = 1_000_000
	mustInit(t, ctx, s, sku, start)
	var (
		wins atomic.Int64
		wg   sync.WaitGroup
	)
	for range writers {
		wg.Go(func() {
			for ctx.Err() == nil {
				cur, v, err := s.Read(ctx, sku)
				if err != nil {
					t.Errorf("Read: %v", err)
					return
				}
				ok, err := s.CompareAndSet(ctx, sku, v, cur-1, driver.DirReduce, "once")
				switch {
				case errors.Is(err, inventory.ErrDuplicate):
					return
				case err != nil:
					t.Errorf("CompareAndSet: %v", err)
					return
				case ok:
					wins.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Errorf("%d CompareAndSets with one key took effect, want exactly 1", n)
	}
	wantStock(t, ctx, s, sku, start-1)
	wantSeen(t, ctx, s, sku, driver.DirReduce, "once", start-1, true)
}
