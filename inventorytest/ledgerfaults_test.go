package inventorytest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ledger"
)

// crashable is an in-memory Manager with a ledger and a server that can
// crash: while it is down, every call fails with errDown, and every other
// one has taken effect, entry and all (its answer was lost). bug breaks
// the ledger's promise under the fault:
//
//   - "move-without-entry": a call while down takes effect without its entry;
//   - "entry-twice": a keyed retry that finds its key records its entry again;
//   - "entry-without-move": a call while down records its entry, not its move.
type crashable struct {
	bug string

	mu      sync.Mutex
	down    bool
	n       int
	stock   map[string]int64
	sold    map[string]int64
	held    map[string]int64
	holds   map[string]*crashHold
	keys    map[string]bool
	entries map[string][]ledger.Entry
	pos     int64
}

var errDown = errors.New("crashable: the server is down")

func newCrashable(bug string) *crashable {
	return &crashable{bug: bug, stock: map[string]int64{}, sold: map[string]int64{}, held: map[string]int64{},
		holds: map[string]*crashHold{}, keys: map[string]bool{}, entries: map[string][]ledger.Entry{}}
}

func (c *crashable) kill()    { c.mu.Lock(); c.down = true; c.mu.Unlock() }
func (c *crashable) restart() { c.mu.Lock(); c.down = false; c.mu.Unlock() }

func (c *crashable) record(sku string, kind ledger.Kind, units int64, key, ref string) {
	c.recordHold(sku, kind, units, key, ref, "")
}

func (c *crashable) recordHold(sku string, kind ledger.Kind, units int64, key, ref, hold string) {
	c.pos++
	c.entries[sku] = append(c.entries[sku], ledger.Entry{SKU: sku, Pos: c.pos, Kind: kind, Units: units,
		After: ledger.Stock{Available: c.stock[sku], Held: c.held[sku], Sold: c.sold[sku]}, Key: key, Ref: ref,
		Hold: hold, Time: time.Now()})
}

func (c *crashable) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return errDown
	}
	c.stock[sku] = qty
	c.record(sku, ledger.Init, qty, "", "")
	return nil
}

func (c *crashable) Get(ctx context.Context, sku string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return 0, errDown
	}
	n, ok := c.stock[sku]
	if !ok {
		return 0, inventory.ErrNotFound
	}
	return n, nil
}

func (c *crashable) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return c.move(sku, ledger.Reduce, qty, opts)
}

func (c *crashable) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return c.move(sku, ledger.Return, qty, opts)
}

func (c *crashable) move(sku string, kind ledger.Kind, qty int64, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.stock[sku]; !ok {
		return 0, inventory.ErrNotFound
	}
	down := c.down
	if down {
		c.n++
		if c.n%2 == 0 {
			return 0, errDown // lost before it reached the server
		}
	}
	key := string(kind) + "/" + sku + "/" + o.Key
	if o.Key != "" && c.keys[key] {
		if c.bug == "entry-twice" {
			c.record(sku, kind, qty, o.Key, o.Ref)
		}
		return 0, inventory.ErrDuplicate
	}
	d := -qty
	if kind == ledger.Return {
		d = qty
	}
	if c.stock[sku]+d < 0 {
		return 0, inventory.ErrInsufficientStock
	}
	if !down || c.bug != "entry-without-move" {
		c.stock[sku] += d
		c.sold[sku] -= d
	}
	if o.Key != "" {
		c.keys[key] = true
	}
	if !down || c.bug != "move-without-entry" {
		c.record(sku, kind, qty, o.Key, o.Ref)
	}
	if down {
		return 0, errDown // it took effect; its answer was lost
	}
	return c.stock[sku], nil
}

func (c *crashable) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if err := ledger.CheckPage(after, limit); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, errDown
	}
	var out []ledger.Entry
	for _, e := range c.entries[sku] {
		if e.Pos > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func runCrashable(t *testing.T, bug string) inventorytest.LedgerFaultsResult {
	c := newCrashable(bug)
	return inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
		NewManager: func(*testing.T) inventory.StockManager { return c },
		Kill:       c.kill,
		Restart:    c.restart,
		Down:       50 * time.Millisecond,
		Buyers:     300,
		Timeout:    time.Minute,
	})
}

// TestLedgerFaults: a ledger that keeps its promise under the fault
// passes, calls whose answers were lost included.
func TestLedgerFaults(t *testing.T) {
	res := runCrashable(t, "")
	require.Positive(t, res.Failed)
	require.Positive(t, res.Moves)
	require.Zero(t, res.Lost)
}

const ledgerBugEnv = "INVENTORYTEST_LEDGER_BUG"

// TestLedgerFaultsChild is the child process of
// TestLedgerFaultsCatchesBrokenLedgers.
func TestLedgerFaultsChild(t *testing.T) {
	bug := os.Getenv(ledgerBugEnv)
	if bug == "" {
		t.Skip("runs only as the child process of TestLedgerFaultsCatchesBrokenLedgers")
	}
	if hold, ok := strings.CutPrefix(bug, "holds/"); ok {
		runCrashableOrders(t, hold, hold == "released-unbounded")
		return
	}
	runCrashable(t, bug)
}

// TestLedgerFaultsCatchesBrokenLedgers: RunLedgerFaults fails a ledger
// that breaks its promise under the fault, and says how; with holds too.
func TestLedgerFaultsCatchesBrokenLedgers(t *testing.T) {
	for bug, says := range map[string]string{
		"move-without-entry": "a move without its entry",
		"entry-twice":        "a call recorded twice",
		"entry-without-move": "replay of",
		// holds (crashableOrders)
		"holds/retake-without-give-back": "neither given back nor written off",
		"holds/released-unbounded":       "holds found dropped",
	} {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerFaultsChild$", "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), ledgerBugEnv+"="+bug)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "RunLedgerFaults passed a ledger with the bug %s:\n%s", bug, out)
			require.Contains(t, string(out), says, "the run with the bug %s", bug)
			require.Contains(t, string(out), "--- FAIL: TestLedgerFaultsChild", "the run with the bug %s", bug)
		})
	}
}
