package inventorytest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
)

func TestMemory(t *testing.T) {
	inventorytest.Run(t, inventorytest.Config{
		NewManager: func(*testing.T) inventory.StockManager { return inventorytest.NewMemory(0) },
	})
}

// brokenManagers each break one rule of the contract. The suite must catch
// every one of them: a suite that cannot fail proves nothing.
var brokenManagers = map[string]struct {
	make     func() inventory.StockManager
	mustFail []string // subtests that must fail
	mustPass []string // subtests that must still pass: the failure is targeted
}{
	"racy": {
		make:     func() inventory.StockManager { return newRacy() },
		mustFail: []string{"FlashSale", "ConcurrentSameKey", "ManySKUsSellOut"},
		mustPass: []string{"Reduce", "IdempotentReduce", "InvalidArguments"},
	},
	"lenient": {
		make:     func() inventory.StockManager { return lenient{inventorytest.NewMemory(0)} },
		mustFail: []string{"InvalidArguments"},
		mustPass: []string{"FlashSale", "Reduce"},
	},
	"case-folding": {
		make:     func() inventory.StockManager { return folding{inventorytest.NewMemory(0)} },
		mustFail: []string{"DistinctSKUs", "OddSKUs"},
		mustPass: []string{"FlashSale", "Reduce"},
	},
	"swallows-errors": {
		make:     func() inventory.StockManager { return swallowing{inventorytest.NewMemory(0)} },
		mustFail: []string{"CancelledContext"},
		mustPass: []string{"FlashSale", "Reduce"},
	},
	"burns-keys": {
		make:     func() inventory.StockManager { return newKeyBurner() },
		mustFail: []string{"FailedCallKeepsKey"},
		// Not ConcurrentSameKey: a caller that finds the key burnt before
		// its holder has written reports the stock unchanged, so the
		// outcome of that subtest depends on scheduling.
		mustPass: []string{"FlashSale", "Reduce", "IdempotencyScope"},
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
		NewManager: func(*testing.T) inventory.StockManager { return b.make() },
		Timeout:    time.Minute,
	})
}

func TestSuiteCatchesBrokenManagers(t *testing.T) {
	for name, b := range brokenManagers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenChild$", "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+name)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the suite passed a %s manager:\n%s", name, out)
			for _, sub := range b.mustFail {
				require.Contains(t, string(out), "--- FAIL: TestBrokenChild/"+sub+" ",
					"the suite did not catch the %s manager in %s:\n%s", name, sub, out)
			}
			for _, sub := range b.mustPass {
				require.Contains(t, string(out), "--- PASS: TestBrokenChild/"+sub+" ",
					"%s should pass for the %s manager:\n%s", sub, name, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "flash sale:") {
					t.Logf("%s manager:%s", name, line)
				}
			}
		})
	}
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
	if err := inventory.ValidateInit(sku, qty); err != nil {
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
	if err := inventory.ValidateSKU(sku); err != nil {
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
	o, err := inventory.ValidateMove(sku, qty, opts)
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
	if err := inventory.CheckReturn(cur, delta); delta > 0 && err != nil {
		return cur, err
	}
	time.Sleep(100 * time.Microsecond) // the window every real backend has
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
	o := inventory.Apply(opts)
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
