package inventorytest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/inventorytest"
)

func TestMemory(t *testing.T) {
	inventorytest.Run(t, inventorytest.Config{
		NewManager:    func(*testing.T) inventory.StockManager { return inventorytest.NewMemory(0) },
		RequireOrders: true,
	})
}

// TestMemoryShared runs the suite on one Memory for every subtest, as a
// backend shared by successive managers (or runs): the subtests' SKUs, hold
// ids and keys must not meet.
func TestMemoryShared(t *testing.T) {
	m := inventorytest.NewMemory(0)
	inventorytest.Run(t, inventorytest.Config{
		NewManager:    func(*testing.T) inventory.StockManager { return m },
		RequireOrders: true,
	})
}

// broken is a manager that breaks a rule, and what the suite must report.
type broken struct {
	make          func() inventory.StockManager
	requireOrders bool
	mustFail      []string      // subtests that must fail
	mustPass      []string      // subtests that must still pass: the failure is targeted
	mustLog       []string      // texts the run must print
	stall         time.Duration // Config.StallTimeout, if not 0
	run           string        // the subtests the child runs (a -test.run pattern under TestBrokenChild); all if empty
}

// brokenManagers each break one rule of the contract. The suite must catch
// every one of them: a suite that cannot fail proves nothing. The
// StockManager bugs hide Memory's order methods (stockOnly), so that each
// failure stays targeted; the order bugs keep them.
var brokenManagers = map[string]broken{
	"racy": {
		make:     func() inventory.StockManager { return newRacy() },
		mustFail: []string{"FlashSale", "ConcurrentSameKey", "ManySKUsSellOut"},
		mustPass: []string{"Reduce", "IdempotentReduce", "InvalidArguments"},
		mustLog:  []string{"is not an inventory.OrderManager; the order subtests did not run", "oversold"},
	},
	"lenient": {
		make:     func() inventory.StockManager { return stockOnly{lenient{inventorytest.NewMemory(0)}} },
		mustFail: []string{"InvalidArguments"},
		mustPass: []string{"FlashSale", "Reduce"},
	},
	"case-folding": {
		make:     func() inventory.StockManager { return stockOnly{folding{inventorytest.NewMemory(0)}} },
		mustFail: []string{"DistinctSKUs", "OddSKUs"},
		mustPass: []string{"FlashSale", "Reduce"},
	},
	"swallows-errors": {
		make:     func() inventory.StockManager { return stockOnly{swallowing{inventorytest.NewMemory(0)}} },
		mustFail: []string{"CancelledContext"},
		mustPass: []string{"FlashSale", "Reduce"},
	},
	"burns-keys": {
		make:     func() inventory.StockManager { return stockOnly{newKeyBurner()} },
		mustFail: []string{"FailedCallKeepsKey"},
		// Not ConcurrentSameKey: a caller that finds the key burnt before
		// its holder has written reports the stock unchanged, so the
		// outcome of that subtest depends on scheduling.
		mustPass: []string{"FlashSale", "Reduce", "IdempotencyScope"},
	},
	"orders-required": {
		make:          func() inventory.StockManager { return stockOnly{inventorytest.NewMemory(0)} },
		requireOrders: true,
		mustPass:      []string{"FlashSale", "Reduce"},
		mustLog:       []string{"Config.RequireOrders is set, but inventorytest_test.stockOnly does not implement inventory.OrderManager"},
	},
	"partial-cart": {
		make:     func() inventory.StockManager { return partialCart{inventorytest.NewMemory(0)} },
		mustFail: []string{"Orders/AllOrNothing", "Orders/Carts"},
		mustPass: []string{"Orders/Confirm", "Orders/Cancel", "Orders/Sweep", "Orders/ConfirmRacesExpiry", "FlashSale"},
	},
	"never-expires": {
		make: func() inventory.StockManager { return neverExpires{inventorytest.NewMemory(0)} },
		mustFail: []string{"Orders/ExpiryWithTraffic", "Orders/ConfirmAfterExpiry", "Orders/CancelAfterExpiry",
			"Orders/Sweep", "Orders/Reap", "Orders/Carts"},
		mustPass: []string{"Orders/AllOrNothing", "Orders/Reserve", "Orders/Confirm", "Orders/Cancel"},
	},
	"confirms-late": {
		make:     func() inventory.StockManager { return newLateConfirm(true) },
		mustFail: []string{"Orders/ConfirmAfterExpiry", "Orders/ExpiryWithTraffic", "Orders/ConfirmRacesExpiry"},
		mustPass: []string{"Orders/AllOrNothing", "Orders/Confirm", "Orders/Cancel", "Orders/Carts"},
	},
	"confirm-and-expiry-both-win": {
		make:     func() inventory.StockManager { return newLateConfirm(false) },
		mustFail: []string{"Orders/ConfirmAfterExpiry", "Orders/ConfirmRacesExpiry"},
		mustPass: []string{"Orders/AllOrNothing", "Orders/Confirm", "Orders/Cancel", "Orders/Carts"},
	},
	"expires-early": {
		make:     func() inventory.StockManager { return expiresEarly{inventorytest.NewMemory(0)} },
		mustFail: []string{"Orders/ConfirmRacesExpiry"},
		mustPass: []string{"Orders/AllOrNothing", "Orders/Confirm", "Orders/ExpiryWithTraffic", "Orders/Carts"},
	},
	// The stuck managers make the concurrent subtests stall: the suite
	// must say so within StallTimeout, not wait out Timeout.
	"stuck-when-sold-out": {
		make:     func() inventory.StockManager { return stockOnly{soldOutContention{inventorytest.NewMemory(0)}} },
		mustFail: []string{"FlashSale", "FlashSaleMultiUnit", "ReduceInsufficient"},
		mustPass: []string{"Reduce"},
		mustLog:  []string{"stuck: no call finished for"},
		stall:    time.Second,
		run:      "^(FlashSale|FlashSaleMultiUnit|Reduce|ReduceInsufficient)$",
	},
	"hangs": {
		make:     func() inventory.StockManager { return stockOnly{hanging{inventorytest.NewMemory(0)}} },
		mustFail: []string{"FlashSale"},
		mustPass: []string{"Reduce", "FlashSaleMultiUnit"},
		mustLog:  []string{"stuck: no call finished for", "while 1 calls were out"},
		stall:    time.Second,
		run:      "^(FlashSale|FlashSaleMultiUnit|Reduce)$",
	},
	// The cleaning managers write a cleaned-up copy of a SKU they refuse,
	// each cleaning it its own way. Only the subtests named run.
	"cleaning-trim": cleaningManager(strings.TrimSpace),
	"cleaning-controls": cleaningManager(func(s string) string {
		return strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return -1
			}
			return r
		}, s)
	}),
	"cleaning-truncate":     cleaningManager(func(s string) string { return s[:min(len(s), inventory.MaxSKULen)] }),
	"cleaning-utf8-replace": cleaningManager(func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }),
	"cleaning-utf8-drop":    cleaningManager(func(s string) string { return strings.ToValidUTF8(s, "") }),
	"cleaning-lower": cleaningManager(func(s string) string {
		return strings.ToLower(strings.TrimFunc(strings.ToValidUTF8(s, ""), unicode.IsControl))
	}),
	"cleaning-nfc": cleaningManager(func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), "e\u0301", "\u00e9")
	}),
	"double-release": {
		make:     func() inventory.StockManager { return newDoubleRelease() },
		mustFail: []string{"Orders/CancelAfterExpiry", "Orders/Carts"},
		mustPass: []string{"Orders/AllOrNothing", "Orders/Cancel", "Orders/Sweep", "Orders/Reap"},
	},
}

const brokenEnv = "INVENTORYTEST_BROKEN"

// TestBrokenChild is the child process of TestSuiteCatchesBrokenManagers:
// it runs the suite against one broken manager and is expected to fail.
func TestBrokenChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("runs only as the child process of TestSuiteCatchesBrokenManagers")
	}
	b := brokenManagers[name]
	inventorytest.Run(t, inventorytest.Config{
		NewManager:    func(*testing.T) inventory.StockManager { return b.make() },
		Timeout:       time.Minute,
		RequireOrders: b.requireOrders,
		StallTimeout:  b.stall,
	})
}

func TestSuiteCatchesBrokenManagers(t *testing.T) {
	for name, b := range brokenManagers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run := "^TestBrokenChild$"
			if b.run != "" {
				run += "/" + b.run
			}
			cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+name)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the suite passed a %s manager:\n%s", name, out)
			failed := failures(string(out))
			for _, sub := range b.mustFail {
				require.Contains(t, string(out), "--- FAIL: TestBrokenChild/"+sub+" ",
					"the suite did not catch the %s manager in %s; it failed:\n%s", name, sub, failed)
			}
			for _, sub := range b.mustPass {
				require.Contains(t, string(out), "--- PASS: TestBrokenChild/"+sub+" ",
					"%s should pass for the %s manager; the run failed:\n%s", sub, name, failed)
			}
			for _, l := range b.mustLog {
				require.Contains(t, string(out), l, "the run of the %s manager:\n%s", name, out)
			}
			t.Logf("%s manager failed:%s", name, strings.ReplaceAll("\n"+failed, "\n", " "))
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "flash sale:") {
					t.Logf("%s manager:%s", name, line)
				}
			}
		})
	}
}

// failures lists the subtests that failed in a child's output, one a line.
func failures(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestBrokenChild/"); ok {
			b.WriteString(strings.Fields(f)[0] + "\n")
		}
	}
	if b.Len() == 0 {
		return "TestBrokenChild itself, no subtest"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// racy is the classic oversell bug: read, check, pause, write. Each read and
// write is locked, so the race detector is quiet; the logic still races.
type racy struct {
	mu    sync.Mutex
	stock map[string]int64
	keys  map[string]int64
}

func newRacy() *racy { return &racy{stock: map[string]int64{}, keys: map[string]int64{}} }

func (r *racy) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stock[sku] = qty
	return nil
}

func (r *racy) Get(ctx context.Context, sku string) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.stock[sku]
	if !ok {
		return 0, inventory.ErrNotFound
	}
	return n, nil
}

func (r *racy) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return r.move(ctx, sku, -qty, qty, "r", opts)
}

func (r *racy) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return r.move(ctx, sku, qty, qty, "R", opts)
}

func (r *racy) move(ctx context.Context, sku string, delta, qty int64, dir string, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	k := dir + "\x00" + sku + "\x00" + o.Key
	r.mu.Lock()
	first, seen := r.keys[k]
	cur, ok := r.stock[sku]
	r.mu.Unlock()
	if o.Key != "" && seen {
		return first, inventory.ErrDuplicate
	}
	if !ok {
		return 0, inventory.ErrNotFound
	}
	if cur+delta < 0 {
		return cur, inventory.ErrInsufficientStock
	}
	if err := driver.CheckReturn(cur, delta); delta > 0 && err != nil {
		return cur, err
	}
	time.Sleep(time.Millisecond) // the window every real backend has (a round trip)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stock[sku] = cur + delta
	if o.Key != "" {
		r.keys[k] = cur + delta
	}
	return cur + delta, nil
}

// lenient skips validation of quantities and keys.
type lenient struct{ *inventorytest.Memory }

func (l lenient) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if qty < 1 {
		return l.Get(ctx, sku)
	}
	return l.Memory.Reduce(ctx, sku, min(qty, inventory.MaxStock), opts...)
}

// folding treats SKUs case-insensitively, as a default SQL collation does.
type folding struct{ *inventorytest.Memory }

func (f folding) Init(ctx context.Context, sku string, qty int64) error {
	return f.Memory.Init(ctx, strings.ToLower(sku), qty)
}
func (f folding) Get(ctx context.Context, sku string) (int64, error) {
	return f.Memory.Get(ctx, strings.ToLower(sku))
}
func (f folding) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.Memory.Reduce(ctx, strings.ToLower(sku), qty, opts...)
}
func (f folding) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return f.Memory.Return(ctx, strings.ToLower(sku), qty, opts...)
}

// swallowing reports every server-side failure as insufficient stock.
type swallowing struct{ *inventorytest.Memory }

func (s swallowing) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := s.Memory.Reduce(ctx, sku, qty, opts...)
	if err != nil && ctx.Err() != nil {
		return 0, inventory.ErrInsufficientStock
	}
	return rem, err
}

// keyBurner records a key before it knows whether the call takes effect.
type keyBurner struct {
	*inventorytest.Memory
	mu   sync.Mutex
	used map[string]bool
}

func newKeyBurner() *keyBurner {
	return &keyBurner{Memory: inventorytest.NewMemory(0), used: map[string]bool{}}
}

func (k *keyBurner) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	o := driver.Apply(opts)
	if o.Key != "" {
		id := fmt.Sprint(sku, "\x00", o.Key)
		k.mu.Lock()
		burnt := k.used[id]
		k.used[id] = true
		k.mu.Unlock()
		if burnt {
			rem, _ := k.Get(ctx, sku)
			return rem, inventory.ErrDuplicate
		}
	}
	return k.Memory.Reduce(ctx, sku, qty)
}

// cleaning cleans an invalid SKU up and, if that gives a valid SKU, applies
// the call to it before refusing the call: a bug that changes a SKU the
// caller never named.
type cleaning struct {
	*inventorytest.Memory
	clean func(string) string
}

// cleaningManager is the brokenManagers entry of a cleaning manager: the
// suite must catch it in InvalidArguments, and nowhere else.
func cleaningManager(clean func(string) string) broken {
	return broken{
		make:     func() inventory.StockManager { return stockOnly{cleaning{inventorytest.NewMemory(0), clean}} },
		mustFail: []string{"InvalidArguments"},
		mustPass: []string{"Reduce", "OddSKUs", "DistinctSKUs"},
		run:      "^(InvalidArguments|Reduce|OddSKUs|DistinctSKUs)$",
	}
}

// cleaned returns the cleaned-up SKU cleaning writes for sku, if sku is
// invalid and cleaning it gives a valid SKU.
func (c cleaning) cleaned(sku string) (string, bool) {
	if driver.ValidateSKU(sku) == nil {
		return "", false
	}
	v := c.clean(sku)
	return v, driver.ValidateSKU(v) == nil
}

func (c cleaning) Init(ctx context.Context, sku string, qty int64) error {
	if v, ok := c.cleaned(sku); ok {
		_ = c.Memory.Init(ctx, v, max(qty, 0))
	}
	return c.Memory.Init(ctx, sku, qty)
}

func (c cleaning) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if v, ok := c.cleaned(sku); ok {
		_, _ = c.Memory.Reduce(ctx, v, qty, opts...)
	}
	return c.Memory.Reduce(ctx, sku, qty, opts...)
}

func (c cleaning) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if v, ok := c.cleaned(sku); ok {
		_, _ = c.Memory.Return(ctx, v, qty, opts...)
	}
	return c.Memory.Return(ctx, sku, qty, opts...)
}

// soldOutContention reports ErrContention where it should report
// ErrInsufficientStock: a caller that retries contention, as the suite
// does, retries for ever once the stock runs out.
type soldOutContention struct{ *inventorytest.Memory }

func (s soldOutContention) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := s.Memory.Reduce(ctx, sku, qty, opts...)
	if errors.Is(err, inventory.ErrInsufficientStock) {
		return 0, fmt.Errorf("%w (sold out, retry)", inventory.ErrContention)
	}
	return rem, err
}

// hanging never returns from one buyer's keyed Reduce until ctx ends.
type hanging struct{ *inventorytest.Memory }

func (h hanging) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	if driver.Apply(opts).Key == "buyer-7" {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return h.Memory.Reduce(ctx, sku, qty, opts...)
}

// stockOnly hides every method but StockManager's.
type stockOnly struct{ inventory.StockManager }

// partialCart applies a cart's lines one by one and stops at the first that
// does not fit, keeping what it took.
type partialCart struct{ *inventorytest.Memory }

func (p partialCart) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	if _, err := driver.ValidateLinesCall(lines, opts); err != nil {
		return err
	}
	for _, l := range lines {
		rem, err := p.Reduce(ctx, l.SKU, l.Qty)
		if errors.Is(err, inventory.ErrInsufficientStock) {
			return &inventory.InsufficientError{Short: []inventory.Shortfall{{Line: l, Available: rem}}}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// neverExpires ignores the TTL of its holds.
type neverExpires struct{ *inventorytest.Memory }

func (n neverExpires) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if err := driver.ValidateReserve(id, lines, ttl); err != nil {
		return err
	}
	return n.Memory.Reserve(ctx, id, lines, inventory.MaxHoldTTL)
}

// expiresEarly ends its holds at half their TTL (a TTL rounded down to the
// second, say).
type expiresEarly struct{ *inventorytest.Memory }

func (e expiresEarly) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if err := driver.ValidateReserve(id, lines, ttl); err != nil {
		return err
	}
	return e.Memory.Reserve(ctx, id, lines, max(ttl/2, inventory.MinHoldTTL))
}

// lateConfirm's Confirm looks at the hold's state, not at its TTL: it
// confirms an expired hold nobody cancelled. With retake, it takes the
// released units again (sells after the TTL); without, it reports the sale
// and leaves the units released as well (both win).
type lateConfirm struct {
	*inventorytest.Memory
	retake bool

	mu        sync.Mutex
	lines     map[string][]inventory.Line
	cancelled map[string]bool
	confirmed map[string]bool
}

func newLateConfirm(retake bool) *lateConfirm {
	return &lateConfirm{Memory: inventorytest.NewMemory(0), retake: retake,
		lines: map[string][]inventory.Line{}, cancelled: map[string]bool{}, confirmed: map[string]bool{}}
}

func (l *lateConfirm) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	err := l.Memory.Reserve(ctx, id, lines, ttl)
	if err == nil {
		l.mu.Lock()
		l.lines[id] = lines
		l.mu.Unlock()
	}
	return err
}

func (l *lateConfirm) Cancel(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.confirmed[id] {
		return inventory.ErrHoldConfirmed
	}
	err := l.Memory.Cancel(ctx, id)
	if err == nil {
		l.cancelled[id] = true
	}
	return err
}

func (l *lateConfirm) Confirm(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.confirmed[id] {
		return inventory.ErrDuplicate
	}
	err := l.Memory.Confirm(ctx, id)
	if !errors.Is(err, inventory.ErrHoldReleased) || l.cancelled[id] {
		return err
	}
	if l.retake {
		if err := l.ReduceLines(ctx, l.lines[id]); err != nil {
			return inventory.ErrHoldReleased
		}
	}
	l.confirmed[id] = true
	return nil
}

// doubleRelease's Cancel of an expired hold gives its units back even when
// the expiry already did.
type doubleRelease struct {
	*inventorytest.Memory

	mu    sync.Mutex
	holds map[string]*brokenHold
}

type brokenHold struct {
	lines   []inventory.Line
	expires time.Time // no earlier than Memory's
	done    bool
}

func newDoubleRelease() *doubleRelease {
	return &doubleRelease{Memory: inventorytest.NewMemory(0), holds: map[string]*brokenHold{}}
}

func (d *doubleRelease) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	err := d.Memory.Reserve(ctx, id, lines, ttl)
	if err == nil {
		d.mu.Lock()
		d.holds[id] = &brokenHold{lines: lines, expires: time.Now().Add(ttl)}
		d.mu.Unlock()
	}
	return err
}

func (d *doubleRelease) Cancel(ctx context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.Memory.Cancel(ctx, id)
	if h := d.holds[id]; err == nil && h != nil && !h.done {
		h.done = true
		if time.Now().After(h.expires) {
			return d.ReturnLines(ctx, h.lines)
		}
	}
	return err
}
