package lockmgrtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/lockmgr"
)

// HoldStoreConfig says how to make the HoldStores under test.
type HoldStoreConfig struct {
	// NewStore returns a HoldStore for one subtest, made with key TTL
	// KeyTTL; release what it opens with t.Cleanup. Stores from
	// successive calls may share a backend.
	NewStore func(t *testing.T) lockmgr.HoldStore

	// KeyTTL is the key TTL NewStore's stores keep done orders for. When
	// it is at most 2s, KeyTTL checks that a done order is forgotten
	// after it; otherwise that subtest skips.
	KeyTTL time.Duration

	// Writers is how many goroutines race in the concurrent subtests; the
	// default is 50.
	Writers int

	// Races is how many Confirm-against-expiry races ConfirmRacesExpiry
	// runs; the default is 50.
	Races int

	// Timeout bounds each subtest; the default is 2 minutes.
	Timeout time.Duration
}

// RunHoldStore runs the HoldStore conformance suite as subtests of t. Run
// RunStore on the same store too: this suite checks only what holds add.
//
//   - HoldUnhold: Hold moves units from the stock into a line and the held
//     total; Unhold gives them back (or, sold, drops them) once.
//   - HoldStaleVersion: a Hold at a stale version writes nothing.
//   - UnholdMovesVersion: an Unhold that gives units back makes a
//     version read before it stale.
//   - NotFound: ReadHolds and Held of an unknown SKU wrap ErrNotFound; a
//     Hold on it is refused and creates nothing.
//   - ExpiredLines: ReadHolds names the lines whose expiry has passed,
//     earliest first, at most max.
//   - OrderSteps: the record's steps, their conditions, and the lines kept
//     byte for byte.
//   - OrderExpiry: past its expiry a Confirm or Cancel of a held order
//     expires it instead, and StepExpire applies.
//   - Abandoned: an incomplete order is due and expires once the grace
//     has passed since it was recorded (not before, and long before its
//     expiry); finishing it deletes it, so its id is free.
//   - ExpiredOrders: only due orders that are not done are listed,
//     earliest first, at most max.
//   - KeyTTL: a done order is forgotten after the key TTL.
//   - ByteExactIDs: odd order ids and SKUs are distinct records and lines.
//   - CancelledContext: each method with a done ctx fails with an error
//     that wraps ctx.Err() and writes nothing.
//   - ConcurrentHold: Writers goroutines Hold at one version: exactly one
//     wins.
//   - ConcurrentUnhold: Writers goroutines Unhold one line: its units come
//     back once.
//   - ConfirmRacesExpiry: Confirms and expiries race on orders at their
//     expiry: exactly one step wins each race, and the record agrees.
func RunHoldStore(t *testing.T, cfg HoldStoreConfig) {
	t.Helper()
	if cfg.NewStore == nil {
		t.Fatal("lockmgrtest: HoldStoreConfig.NewStore is nil")
	}
	cfg.Writers = cmp(cfg.Writers, 50)
	cfg.Races = cmp(cfg.Races, 50)
	cfg.Timeout = cmp(cfg.Timeout, 2*time.Minute)
	runSubtests(t, cfg.Timeout, cfg.NewStore, []subtest[lockmgr.HoldStore]{
		{"HoldUnhold", testHoldUnhold},
		{"HoldStaleVersion", testHoldStale},
		{"UnholdMovesVersion", testUnholdMovesVersion},
		{"NotFound", testHoldNotFound},
		{"ExpiredLines", testExpiredLines},
		{"OrderSteps", testOrderSteps},
		{"OrderExpiry", testOrderExpiry},
		{"Abandoned", testAbandoned},
		{"ExpiredOrders", testExpiredOrders},
		{"KeyTTL", with(cfg.KeyTTL, testKeyTTL)},
		{"ByteExactIDs", testHoldIDs},
		{"CancelledContext", testHoldCancelled},
		{"ConcurrentHold", with(cfg.Writers, testConcurrentHold)},
		{"ConcurrentUnhold", with(cfg.Writers, testConcurrentUnhold)},
		{"ConfirmRacesExpiry", with(cfg.Races, testConfirmRaces)},
	})
}

// far is an expiry no subtest reaches.
func far() time.Time { return time.Now().Add(time.Hour) }

// wantHolds checks the stock and held total of sku.
func wantHolds(t *testing.T, ctx context.Context, s lockmgr.HoldStore, sku string, stock, held int64) {
	t.Helper()
	st, _, h, _, err := s.ReadHolds(ctx, sku, 10)
	if err != nil {
		t.Fatalf("ReadHolds(%q): %v", sku, err)
	}
	if st != stock || h != held {
		t.Errorf("%q: stock %d, held %d; want %d, %d", sku, st, h, stock, held)
	}
	if n, err := s.Held(ctx, sku); err != nil || n != held {
		t.Errorf("Held(%q) = %d, %v; want %d", sku, n, err, held)
	}
	if n, err := s.Get(ctx, sku); err != nil || n != stock {
		t.Errorf("Get(%q) = %d, %v; want %d", sku, n, err, stock)
	}
}

func mustHold(t *testing.T, ctx context.Context, s lockmgr.HoldStore, sku, id string, qty int64, expires time.Time) {
	t.Helper()
	st, v, _, _, err := s.ReadHolds(ctx, sku, 1)
	if err != nil {
		t.Fatalf("ReadHolds(%q): %v", sku, err)
	}
	ok, err := s.Hold(ctx, sku, v, st-qty, id, qty, expires)
	if err != nil || !ok {
		t.Fatalf("Hold(%q, %q, %d) at the version just read = %v, %v; want true", sku, id, qty, ok, err)
	}
}

func mustUnhold(t *testing.T, ctx context.Context, s lockmgr.HoldStore, sku, id string, sold bool, want int64) {
	t.Helper()
	n, err := s.Unhold(ctx, sku, id, sold)
	if err != nil || n != want {
		t.Errorf("Unhold(%q, %q, sold %v) = %d, %v; want %d", sku, id, sold, n, err, want)
	}
}

func mustCreate(t *testing.T, ctx context.Context, s lockmgr.HoldStore, id string, lines []inventory.Line, ttl, grace time.Duration) lockmgr.Order {
	t.Helper()
	before := time.Now()
	o, err := s.CreateOrder(ctx, id, lines, ttl, grace)
	if err != nil {
		t.Fatalf("CreateOrder(%q): %v", id, err)
	}
	// The backend's clock is taken to be within a second of this one.
	if o.Expires.Before(before.Add(ttl-time.Second)) || o.Expires.After(time.Now().Add(ttl+time.Second)) {
		t.Errorf("CreateOrder(%q, ttl %v) expires at %v, made at %v", id, ttl, o.Expires, before)
	}
	wantOrder(t, o, id, lines, lockmgr.OrderHeld, false, false)
	return o
}

func wantOrder(t *testing.T, o lockmgr.Order, id string, lines []inventory.Line, state lockmgr.OrderState, complete, done bool) {
	t.Helper()
	if o.ID != id || !slices.Equal(o.Lines, lines) || o.State != state || o.Complete != complete || o.Done != done {
		t.Errorf("order = %+v; want id %q, lines %v, state %s, complete %v, done %v", o, id, lines, state, complete, done)
	}
}

// step applies st and checks whether it changed the order and its state.
func step(t *testing.T, ctx context.Context, s lockmgr.HoldStore, id string, st lockmgr.OrderStep, changed bool, state lockmgr.OrderState) lockmgr.Order {
	t.Helper()
	o, ch, err := s.UpdateOrder(ctx, id, st)
	if err != nil {
		t.Fatalf("UpdateOrder(%q, %s): %v", id, st, err)
	}
	if ch != changed || o.State != state {
		t.Errorf("UpdateOrder(%q, %s) = state %s, changed %v; want %s, %v", id, st, o.State, ch, state, changed)
	}
	return o
}

func wantNoOrder(t *testing.T, ctx context.Context, s lockmgr.HoldStore, id string) {
	t.Helper()
	if o, err := s.Order(ctx, id); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Order(%q) = %+v, %v; want ErrNotFound", id, o, err)
	}
}

func testHoldUnhold(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	wantHolds(t, ctx, s, sku, 10, 0)
	mustHold(t, ctx, s, sku, "o1", 3, far())
	wantHolds(t, ctx, s, sku, 7, 3)
	mustHold(t, ctx, s, sku, "o2", 2, far())
	wantHolds(t, ctx, s, sku, 5, 5)

	st, v, _, _, _ := s.ReadHolds(ctx, sku, 1)
	if ok, err := s.Hold(ctx, sku, v, st-1, "o1", 1, far()); !errors.Is(err, inventory.ErrDuplicate) {
		t.Errorf("Hold of a line that exists = %v, %v; want ErrDuplicate", ok, err)
	}
	wantHolds(t, ctx, s, sku, 5, 5)

	mustUnhold(t, ctx, s, sku, "o1", false, 3)
	wantHolds(t, ctx, s, sku, 8, 2)
	mustUnhold(t, ctx, s, sku, "o1", false, 0)
	wantHolds(t, ctx, s, sku, 8, 2)
	mustUnhold(t, ctx, s, sku, "o2", true, 2)
	wantHolds(t, ctx, s, sku, 8, 0)
	mustUnhold(t, ctx, s, sku, "o2", false, 0)
	wantHolds(t, ctx, s, sku, 8, 0)
	mustUnhold(t, ctx, s, sku, "never", false, 0)
	// The line is gone: the id may hold again.
	mustHold(t, ctx, s, sku, "o1", 8, far())
	wantHolds(t, ctx, s, sku, 0, 8)
}

func testHoldStale(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	st, v, _, _, _ := s.ReadHolds(ctx, sku, 1)
	if !mustCAS(t, ctx, s, sku, v, 9, driver.DirReduce, "") {
		t.Fatal("CompareAndSet at the version just read was refused")
	}
	if ok, err := s.Hold(ctx, sku, v, st-4, "o1", 4, far()); ok || err != nil {
		t.Errorf("Hold at a stale version = %v, %v; want false, nil", ok, err)
	}
	wantHolds(t, ctx, s, sku, 9, 0)
	mustUnhold(t, ctx, s, sku, "o1", false, 0)
	wantHolds(t, ctx, s, sku, 9, 0)
}

func testUnholdMovesVersion(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	mustHold(t, ctx, s, sku, "o1", 4, far())
	_, v := mustRead(t, ctx, s, sku)
	mustUnhold(t, ctx, s, sku, "o1", false, 4)
	if mustCAS(t, ctx, s, sku, v, 5, driver.DirReduce, "") {
		t.Error("CompareAndSet at the version read before an Unhold succeeded")
	}
	wantHolds(t, ctx, s, sku, 10, 0)
}

func testHoldNotFound(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku := p + "never"
	if _, _, _, _, err := s.ReadHolds(ctx, sku, 1); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("ReadHolds of an unknown SKU: %v, want ErrNotFound", err)
	}
	if _, err := s.Held(ctx, sku); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Held of an unknown SKU: %v, want ErrNotFound", err)
	}
	for _, v := range []int64{0, 1} {
		if ok, err := s.Hold(ctx, sku, v, 0, "o", 1, far()); ok && err == nil {
			t.Errorf("Hold on an unknown SKU at version %d succeeded", v)
		}
	}
	if _, err := s.Get(ctx, sku); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Get after a Hold on an unknown SKU: %v, want ErrNotFound", err)
	}
	if n, err := s.Unhold(ctx, sku, "o", false); n != 0 || err != nil {
		t.Errorf("Unhold on an unknown SKU = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.Get(ctx, sku); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("Get after an Unhold on an unknown SKU: %v, want ErrNotFound", err)
	}
	wantNoOrder(t, ctx, s, p+"no-order")
	if _, _, err := s.UpdateOrder(ctx, p+"no-order", lockmgr.StepConfirm); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("UpdateOrder of an unknown order: %v, want ErrNotFound", err)
	}
}

// expiring returns the expiry of a new order: ttl from now on the
// backend's clock.
func expiring(t *testing.T, ctx context.Context, s lockmgr.HoldStore, id string, ttl time.Duration) time.Time {
	t.Helper()
	return mustCreate(t, ctx, s, id, []inventory.Line{{SKU: "x", Qty: 1}}, ttl, time.Hour).Expires
}

func testExpiredLines(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 100)
	// Orders expiring in this order: late, soon, sooner, and one far off.
	exps := map[string]time.Time{}
	for _, c := range []struct {
		id  string
		ttl time.Duration
	}{{"late", 900 * time.Millisecond}, {"soon", 600 * time.Millisecond}, {"sooner", 300 * time.Millisecond}, {"far", time.Hour}} {
		exps[c.id] = expiring(t, ctx, s, p+c.id, c.ttl)
		mustHold(t, ctx, s, sku, p+c.id, 1, exps[c.id])
	}
	_, _, held, expired, err := s.ReadHolds(ctx, sku, 10)
	if err != nil || held != 4 || len(expired) != 0 {
		t.Fatalf("ReadHolds before any expiry = held %d, expired %q, %v; want 4, none", held, expired, err)
	}
	waitUntil(ctx, exps["late"].Add(50*time.Millisecond))
	_, _, held, expired, err = s.ReadHolds(ctx, sku, 10)
	if want := []string{p + "sooner", p + "soon", p + "late"}; err != nil || held != 4 || !slices.Equal(expired, want) {
		t.Errorf("ReadHolds after three expiries = held %d, expired %q, %v; want 4, %q", held, expired, err, want)
	}
	if _, _, _, expired, _ := s.ReadHolds(ctx, sku, 2); !slices.Equal(expired, []string{p + "sooner", p + "soon"}) {
		t.Errorf("ReadHolds(max 2) named %q, want the two earliest", expired)
	}
	mustUnhold(t, ctx, s, sku, p+"sooner", false, 1)
	if _, _, held, expired, _ := s.ReadHolds(ctx, sku, 10); held != 3 || !slices.Equal(expired, []string{p + "soon", p + "late"}) {
		t.Errorf("ReadHolds after an Unhold = held %d, expired %q; want 3, the other two", held, expired)
	}
	wantHolds(t, ctx, s, sku, 97, 3)
}

// waitUntil sleeps until at (on this process's clock) or ctx is done.
func waitUntil(ctx context.Context, at time.Time) {
	select {
	case <-time.After(time.Until(at)):
	case <-ctx.Done():
	}
}

func testOrderSteps(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	lines := []inventory.Line{{SKU: p + "b", Qty: 2}, {SKU: p + "a", Qty: inventory.MaxStock}, {SKU: p + "商品 {x}", Qty: 1}}
	id := p + "o"
	o := mustCreate(t, ctx, s, id, lines, time.Hour, time.Hour)
	if _, err := s.CreateOrder(ctx, id, lines[:1], time.Hour, time.Hour); !errors.Is(err, inventory.ErrDuplicate) {
		t.Errorf("CreateOrder of an id that exists: %v, want ErrDuplicate", err)
	}
	got, err := s.Order(ctx, id)
	if err != nil {
		t.Fatalf("Order: %v", err)
	}
	wantOrder(t, got, id, lines, lockmgr.OrderHeld, false, false)
	if !got.Expires.Equal(o.Expires) {
		t.Errorf("Order expires at %v, CreateOrder said %v", got.Expires, o.Expires)
	}
	// Not complete: no Confirm, Cancel or Finish applies.
	step(t, ctx, s, id, lockmgr.StepConfirm, false, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepCancel, false, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepFinish, false, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepExpire, false, lockmgr.OrderHeld)
	wantOrder(t, step(t, ctx, s, id, lockmgr.StepComplete, true, lockmgr.OrderHeld), id, lines, lockmgr.OrderHeld, true, false)
	step(t, ctx, s, id, lockmgr.StepComplete, false, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepAbort, false, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepExpire, false, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepFinish, false, lockmgr.OrderHeld)
	wantOrder(t, step(t, ctx, s, id, lockmgr.StepConfirm, true, lockmgr.OrderConfirmed), id, lines, lockmgr.OrderConfirmed, true, false)
	step(t, ctx, s, id, lockmgr.StepConfirm, false, lockmgr.OrderConfirmed)
	step(t, ctx, s, id, lockmgr.StepCancel, false, lockmgr.OrderConfirmed)
	step(t, ctx, s, id, lockmgr.StepExpire, false, lockmgr.OrderConfirmed)
	wantOrder(t, step(t, ctx, s, id, lockmgr.StepFinish, true, lockmgr.OrderConfirmed), id, lines, lockmgr.OrderConfirmed, true, true)
	step(t, ctx, s, id, lockmgr.StepFinish, false, lockmgr.OrderConfirmed)
	got, err = s.Order(ctx, id)
	if err != nil {
		t.Fatalf("Order of a done order: %v", err)
	}
	wantOrder(t, got, id, lines, lockmgr.OrderConfirmed, true, true)
	if _, err := s.CreateOrder(ctx, id, lines, time.Hour, time.Hour); !errors.Is(err, inventory.ErrDuplicate) {
		t.Errorf("CreateOrder of a done order's id: %v, want ErrDuplicate", err)
	}

	// Cancel, then abort.
	c := p + "c"
	mustCreate(t, ctx, s, c, lines[:1], time.Hour, time.Hour)
	step(t, ctx, s, c, lockmgr.StepComplete, true, lockmgr.OrderHeld)
	step(t, ctx, s, c, lockmgr.StepCancel, true, lockmgr.OrderCancelled)
	step(t, ctx, s, c, lockmgr.StepCancel, false, lockmgr.OrderCancelled)
	step(t, ctx, s, c, lockmgr.StepConfirm, false, lockmgr.OrderCancelled)
	step(t, ctx, s, c, lockmgr.StepFinish, true, lockmgr.OrderCancelled)

	a := p + "a"
	mustCreate(t, ctx, s, a, lines, time.Hour, time.Hour)
	step(t, ctx, s, a, lockmgr.StepAbort, true, lockmgr.OrderHeld)
	wantNoOrder(t, ctx, s, a)
	if _, _, err := s.UpdateOrder(ctx, a, lockmgr.StepAbort); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("StepAbort of an aborted order: %v, want ErrNotFound", err)
	}
	mustCreate(t, ctx, s, a, lines[:2], time.Hour, time.Hour) // its id is free again
}

func testOrderExpiry(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	lines := []inventory.Line{{SKU: p + "a", Qty: 1}}
	const ttl = 300 * time.Millisecond
	ids := []string{p + "confirm", p + "cancel", p + "expire"}
	var exp time.Time
	for _, id := range ids {
		exp = mustCreate(t, ctx, s, id, lines, ttl, time.Hour).Expires
		step(t, ctx, s, id, lockmgr.StepComplete, true, lockmgr.OrderHeld)
		step(t, ctx, s, id, lockmgr.StepExpire, false, lockmgr.OrderHeld)
	}
	waitUntil(ctx, exp.Add(50*time.Millisecond))
	step(t, ctx, s, ids[0], lockmgr.StepConfirm, true, lockmgr.OrderExpired)
	step(t, ctx, s, ids[1], lockmgr.StepCancel, true, lockmgr.OrderExpired)
	step(t, ctx, s, ids[2], lockmgr.StepExpire, true, lockmgr.OrderExpired)
	for _, id := range ids {
		for _, st := range []lockmgr.OrderStep{lockmgr.StepConfirm, lockmgr.StepCancel, lockmgr.StepExpire, lockmgr.StepComplete, lockmgr.StepAbort} {
			step(t, ctx, s, id, st, false, lockmgr.OrderExpired)
		}
		wantOrder(t, step(t, ctx, s, id, lockmgr.StepFinish, true, lockmgr.OrderExpired), id, lines, lockmgr.OrderExpired, true, true)
	}
}

func testAbandoned(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	lines := []inventory.Line{{SKU: p + "a", Qty: 1}}
	id := p + "o"
	// The TTL is far longer than the grace: an order abandoned grace after
	// its expiry (the rule before) fails, one abandoned at its expiry too.
	const ttl, grace = time.Hour, 600 * time.Millisecond
	before := time.Now()
	o := mustCreate(t, ctx, s, id, lines, ttl, grace)
	created := o.Expires.Add(-ttl) // on the backend's clock, to the ms
	ids := mustExpired(t, ctx, s, 1000)
	_, changed, err := s.UpdateOrder(ctx, id, lockmgr.StepExpire)
	if err != nil {
		t.Fatalf("UpdateOrder(%q, %s): %v", id, lockmgr.StepExpire, err)
	}
	// The checks that it is not due yet apply only while less than the
	// grace has passed since before it was created, by the client's clock
	// (a loaded machine may take longer than that to get there; the
	// checks then say so and are not made, and the order may be expired).
	switch took := time.Since(before); {
	case took >= grace-100*time.Millisecond:
		t.Logf("not checked that an incomplete order is not due within its grace: getting there took %v of its %v", took, grace)
		if changed {
			step(t, ctx, s, id, lockmgr.StepFinish, true, lockmgr.OrderExpired)
			created = mustCreate(t, ctx, s, id, lines, ttl, grace).Expires.Add(-ttl)
		}
	case slices.Contains(ids, id):
		t.Errorf("an incomplete order is due before its grace ran out")
	case changed:
		t.Errorf("StepExpire expired an incomplete order before its grace ran out")
	}
	waitUntil(ctx, created.Add(grace+50*time.Millisecond))
	if ids := mustExpired(t, ctx, s, 1000); !slices.Contains(ids, id) {
		t.Errorf("an incomplete order is not due once the grace has passed since it was recorded, long before its expiry (listed %q)", ids)
	}
	step(t, ctx, s, id, lockmgr.StepExpire, true, lockmgr.OrderExpired)
	step(t, ctx, s, id, lockmgr.StepFinish, true, lockmgr.OrderExpired)
	wantNoOrder(t, ctx, s, id)
	if ids := mustExpired(t, ctx, s, 1000); slices.Contains(ids, id) {
		t.Errorf("a deleted order is still due")
	}
	mustCreate(t, ctx, s, id, lines, time.Hour, time.Hour)
}

func mustExpired(t *testing.T, ctx context.Context, s lockmgr.HoldStore, max int) []string {
	t.Helper()
	ids, err := s.ExpiredOrders(ctx, max)
	if err != nil {
		t.Fatalf("ExpiredOrders: %v", err)
	}
	return ids
}

// mine keeps the ids with prefix p: other subtests may share the backend.
func mine(ids []string, p string) []string {
	var out []string
	for _, id := range ids {
		if len(id) >= len(p) && id[:len(p)] == p {
			out = append(out, id)
		}
	}
	return out
}

func testExpiredOrders(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	lines := []inventory.Line{{SKU: p + "a", Qty: 1}}
	var last time.Time
	// The earliest expiry is a second away: the check that nothing is due
	// yet applies only while it is, by the client's clock since before
	// the order was created (a loaded machine may take longer than that
	// to get there; the check then says so and is not made).
	const first = time.Second
	var t0 time.Time
	for _, c := range []struct {
		id  string
		ttl time.Duration
	}{{"3", 3 * first}, {"1", first}, {"2", 2 * first}, {"done", first + first/2}, {"later", time.Hour}} {
		if c.id == "1" {
			t0 = time.Now()
		}
		o := mustCreate(t, ctx, s, p+c.id, lines, c.ttl, time.Hour)
		step(t, ctx, s, p+c.id, lockmgr.StepComplete, true, lockmgr.OrderHeld)
		if c.ttl < time.Hour && o.Expires.After(last) {
			last = o.Expires
		}
	}
	mustCreate(t, ctx, s, p+"incomplete", lines, 100*time.Millisecond, time.Hour)
	step(t, ctx, s, p+"done", lockmgr.StepCancel, true, lockmgr.OrderCancelled)
	step(t, ctx, s, p+"done", lockmgr.StepFinish, true, lockmgr.OrderCancelled)
	ids := mine(mustExpired(t, ctx, s, 1000), p)
	switch took := time.Since(t0); {
	case took >= first-100*time.Millisecond:
		t.Logf("not checked that nothing is due before the first expiry: setting up took %v of its %v", took, first)
	case len(ids) != 0:
		t.Errorf("due before any expiry: %q", ids)
	}
	waitUntil(ctx, last.Add(50*time.Millisecond))
	if ids, want := mine(mustExpired(t, ctx, s, 1000), p), []string{p + "1", p + "2", p + "3"}; !slices.Equal(ids, want) {
		t.Errorf("due after three expiries: %q, want %q", ids, want)
	}
	// max: a store shared with other subtests may list theirs first, so
	// only the count is checked.
	if ids := mustExpired(t, ctx, s, 2); len(ids) != 2 {
		t.Errorf("ExpiredOrders(2) listed %d ids", len(ids))
	}
	step(t, ctx, s, p+"1", lockmgr.StepConfirm, true, lockmgr.OrderExpired)
	if ids, want := mine(mustExpired(t, ctx, s, 1000), p), []string{p + "1", p + "2", p + "3"}; !slices.Equal(ids, want) {
		t.Errorf("due after an expiry that is not finished: %q, want %q", ids, want)
	}
	step(t, ctx, s, p+"1", lockmgr.StepFinish, true, lockmgr.OrderExpired)
	if ids, want := mine(mustExpired(t, ctx, s, 1000), p), []string{p + "2", p + "3"}; !slices.Equal(ids, want) {
		t.Errorf("due after a finish: %q, want %q", ids, want)
	}
}

func testKeyTTL(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string, ttl time.Duration) {
	if ttl <= 0 || ttl > 2*time.Second {
		t.Skipf("HoldStoreConfig.KeyTTL is %v: set it to at most 2s to check that done orders are forgotten", ttl)
	}
	lines := []inventory.Line{{SKU: p + "a", Qty: 1}}
	id := p + "o"
	mustCreate(t, ctx, s, id, lines, time.Hour, time.Hour)
	step(t, ctx, s, id, lockmgr.StepComplete, true, lockmgr.OrderHeld)
	step(t, ctx, s, id, lockmgr.StepConfirm, true, lockmgr.OrderConfirmed)
	// Not done: kept however long it takes.
	time.Sleep(ttl + 100*time.Millisecond)
	if _, err := s.Order(ctx, id); err != nil {
		t.Fatalf("an order not done was forgotten: %v", err)
	}
	step(t, ctx, s, id, lockmgr.StepFinish, true, lockmgr.OrderConfirmed)
	if _, err := s.Order(ctx, id); err != nil {
		t.Fatalf("a done order was forgotten at once: %v", err)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	wantNoOrder(t, ctx, s, id)
	mustCreate(t, ctx, s, id, lines, time.Hour, time.Hour)
}

func testHoldIDs(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 1000)
	for i, n := range names {
		mustHold(t, ctx, s, sku, p+n, int64(i+1), far())
		mustCreate(t, ctx, s, p+n, []inventory.Line{{SKU: p + n, Qty: int64(i + 1)}}, time.Hour, time.Hour)
	}
	var total int64
	for i, n := range names {
		total += int64(i + 1)
		o, err := s.Order(ctx, p+n)
		if err != nil {
			t.Fatalf("Order(%q): %v", n, err)
		}
		wantOrder(t, o, p+n, []inventory.Line{{SKU: p + n, Qty: int64(i + 1)}}, lockmgr.OrderHeld, false, false)
	}
	wantHolds(t, ctx, s, sku, 1000-total, total)
	for i, n := range names {
		mustUnhold(t, ctx, s, sku, p+n, false, int64(i+1))
	}
	wantHolds(t, ctx, s, sku, 1000, 0)
}

func testHoldCancelled(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string) {
	sku, id := p+"a", p+"o"
	mustInit(t, ctx, s, sku, 10)
	mustHold(t, ctx, s, sku, id, 2, far())
	mustCreate(t, ctx, s, id, []inventory.Line{{SKU: sku, Qty: 2}}, time.Hour, time.Hour)
	st, v, _, _, _ := s.ReadHolds(ctx, sku, 1)
	done, cancel := context.WithCancel(ctx)
	cancel()
	check := func(what string, err error) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled ctx: err = %v, want one that wraps context.Canceled", what, err)
		}
	}
	_, _, _, _, err := s.ReadHolds(done, sku, 1)
	check("ReadHolds", err)
	_, err = s.Hold(done, sku, v, st-1, p+"o2", 1, far())
	check("Hold", err)
	_, err = s.Unhold(done, sku, id, false)
	check("Unhold", err)
	_, err = s.Held(done, sku)
	check("Held", err)
	_, err = s.CreateOrder(done, p+"o2", []inventory.Line{{SKU: sku, Qty: 1}}, time.Hour, time.Hour)
	check("CreateOrder", err)
	_, err = s.Order(done, id)
	check("Order", err)
	_, _, err = s.UpdateOrder(done, id, lockmgr.StepAbort)
	check("UpdateOrder", err)
	_, err = s.ExpiredOrders(done, 1)
	check("ExpiredOrders", err)
	wantHolds(t, ctx, s, sku, 8, 2)
	wantNoOrder(t, ctx, s, p+"o2")
	o, err := s.Order(ctx, id)
	if err != nil {
		t.Fatalf("Order: %v", err)
	}
	wantOrder(t, o, id, []inventory.Line{{SKU: sku, Qty: 2}}, lockmgr.OrderHeld, false, false)
}

func testConcurrentHold(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string, writers int) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, int64(writers))
	st, v, _, _, _ := s.ReadHolds(ctx, sku, 1)
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			ok, err := s.Hold(ctx, sku, v, st-1, fmt.Sprint("o", i), 1, far())
			if err != nil {
				t.Errorf("Hold: %v", err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of %d Holds at one version succeeded, want exactly 1", n, writers)
	}
	wantHolds(t, ctx, s, sku, st-1, 1)
}

func testConcurrentUnhold(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string, writers int) {
	sku := p + "a"
	mustInit(t, ctx, s, sku, 10)
	mustHold(t, ctx, s, sku, "o", 4, far())
	var back atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			n, err := s.Unhold(ctx, sku, "o", false)
			if err != nil {
				t.Errorf("Unhold: %v", err)
			}
			back.Add(n)
		})
	}
	wg.Wait()
	if n := back.Load(); n != 4 {
		t.Errorf("%d Unholds of one 4-unit line gave back %d units, want 4", writers, n)
	}
	wantHolds(t, ctx, s, sku, 10, 0)
}

// testConfirmRaces races, on each of races orders, a Confirm against
// StepExpire and a Cancel from the moment the order expires: exactly one
// step may report a change, and the final state is that step's.
func testConfirmRaces(t *testing.T, ctx context.Context, s lockmgr.HoldStore, p string, races int) {
	lines := []inventory.Line{{SKU: p + "a", Qty: 1}}
	const ttl = 30 * time.Millisecond
	confirmed := 0
	for r := range races {
		id := fmt.Sprint(p, "o", r)
		o := mustCreate(t, ctx, s, id, lines, ttl, time.Hour)
		step(t, ctx, s, id, lockmgr.StepComplete, true, lockmgr.OrderHeld)
		// Start near the expiry, some before it and some after.
		waitUntil(ctx, o.Expires.Add(time.Duration(r%7-3)*time.Millisecond))
		type result struct {
			st      lockmgr.OrderStep
			state   lockmgr.OrderState
			changed bool
		}
		steps := []lockmgr.OrderStep{lockmgr.StepConfirm, lockmgr.StepExpire, lockmgr.StepConfirm, lockmgr.StepExpire, lockmgr.StepCancel}
		res := make([]result, len(steps))
		var wg sync.WaitGroup
		for i, st := range steps {
			wg.Go(func() {
				o, ch, err := s.UpdateOrder(ctx, id, st)
				if err != nil {
					t.Errorf("UpdateOrder(%s): %v", st, err)
				}
				res[i] = result{st, o.State, ch}
			})
		}
		wg.Wait()
		final, err := s.Order(ctx, id)
		if err != nil {
			t.Fatalf("Order: %v", err)
		}
		var winners []result
		for _, x := range res {
			if x.changed {
				winners = append(winners, x)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("race %d: %d steps changed the order, want exactly 1: %+v", r, len(winners), res)
		}
		if winners[0].state != final.State || final.State == lockmgr.OrderHeld {
			t.Fatalf("race %d: the winner %s left %s, the record says %s", r, winners[0].st, winners[0].state, final.State)
		}
		if final.State == lockmgr.OrderConfirmed {
			confirmed++
		}
	}
	t.Logf("%d of %d races confirmed, the others expired or cancelled", confirmed, races)
}
