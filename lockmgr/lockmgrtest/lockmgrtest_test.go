package lockmgrtest_test

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

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
)

func TestMemoryLocker(t *testing.T) {
	lockmgrtest.RunLocker(t, memLockerConfig(""))
}

func TestMemoryStore(t *testing.T) {
	lockmgrtest.RunStore(t, lockmgrtest.StoreConfig{
		NewStore: func(*testing.T) lockmgr.Store { return newMemStore("") },
	})
}

func TestMemoryHoldStore(t *testing.T) {
	lockmgrtest.RunHoldStore(t, holdConfig(""))
}

func holdConfig(broken string) lockmgrtest.HoldStoreConfig {
	return lockmgrtest.HoldStoreConfig{
		NewStore: func(*testing.T) lockmgr.HoldStore { return lockmgrtest.NewBrokenMemoryStore(broken, time.Second) },
		KeyTTL:   time.Second,
	}
}

func memLockerConfig(broken string) lockmgrtest.LockerConfig {
	return lockmgrtest.LockerConfig{
		NewLocker: func(t *testing.T) lockmgr.Locker {
			// One backend per subtest, shared by the subtest's Lockers.
			b, _ := backends.LoadOrStore(t.Name(), &memBackend{held: map[string]*memLease{}, wake: make(chan struct{})})
			return &memLocker{b: b.(*memBackend), broken: broken}
		},
		Lapse: func(t *testing.T, l lockmgr.Locker, name string) {
			ml := l.(*memLocker)
			ml.b.lapse(ml.key(name))
		},
	}
}

var backends sync.Map // subtest name -> *memBackend

// The broken implementations each break one rule of a seam. The suites must
// catch every one of them, in the subtests named, and only there.
var (
	brokenLockers = map[string]broken{
		"no-exclusion": {mustFail: []string{"Exclusion", "LapsedReleaseRefused", "CancelledContext", "ByteExactNames"}, mustPass: []string{"LostOnLapse"}},
		"never-lost":   {mustFail: []string{"LostOnLapse"}, mustPass: []string{"Exclusion", "LapsedReleaseRefused", "ByteExactNames"}},
		"frees-any":    {mustFail: []string{"LapsedReleaseRefused"}, mustPass: []string{"Exclusion", "LostOnLapse", "ByteExactNames"}},
		"ignores-ctx":  {mustFail: []string{"CancelledContext", "DeadlineWhileWaiting"}, mustPass: []string{"Exclusion", "LostOnLapse"}},
		"folds-case":   {mustFail: []string{"ByteExactNames"}, mustPass: []string{"Exclusion", "LostOnLapse", "LapsedReleaseRefused"}},
	}
	brokenStores = map[string]broken{
		"ignores-version": {mustFail: []string{"VersionMoves", "StaleVersion", "ConcurrentCAS"}, mustPass: []string{"InitGet", "Ledger", "ByteExactSKUs"}},
		"separate-ledger": {mustFail: []string{"ConcurrentSameKey"}, mustPass: []string{"InitGet", "StaleVersion", "Ledger", "ConcurrentCAS"}},
		"folds-case":      {mustFail: []string{"ByteExactSKUs"}, mustPass: []string{"InitGet", "StaleVersion", "ConcurrentCAS"}},
		"ignores-ctx":     {mustFail: []string{"CancelledContext"}, mustPass: []string{"InitGet", "ConcurrentCAS"}},
	}
	brokenHoldStores = map[string]broken{
		"never-expires":        {mustFail: []string{"ExpiredLines", "OrderExpiry", "Abandoned"}, mustPass: []string{"HoldUnhold", "OrderSteps", "ConcurrentUnhold"}},
		"confirm-after-expiry": {mustFail: []string{"OrderExpiry", "ExpiredOrders"}, mustPass: []string{"HoldUnhold", "ExpiredLines", "OrderSteps", "ConfirmRacesExpiry"}},
		"split-steps":          {mustFail: []string{"ConfirmRacesExpiry"}, mustPass: []string{"HoldUnhold", "OrderSteps", "OrderExpiry"}},
		"double-release":       {mustFail: []string{"HoldUnhold", "ConcurrentUnhold"}, mustPass: []string{"OrderSteps", "ConcurrentHold"}},
		"no-held-total":        {mustFail: []string{"HoldUnhold", "ByteExactIDs", "ConcurrentHold"}, mustPass: []string{"OrderSteps", "Abandoned"}},
		"ignores-version":      {mustFail: []string{"HoldStaleVersion", "ConcurrentHold"}, mustPass: []string{"HoldUnhold", "OrderSteps"}},
		"ignores-ctx":          {mustFail: []string{"CancelledContext"}, mustPass: []string{"HoldUnhold", "OrderSteps"}},
		"abandon-after-expiry": {mustFail: []string{"Abandoned"}, mustPass: []string{"HoldUnhold", "OrderSteps", "OrderExpiry", "ExpiredOrders"}},
	}
)

type broken struct{ mustFail, mustPass []string }

const brokenEnv = "LOCKMGRTEST_BROKEN"

// TestBrokenChild is the child process of TestSuitesCatchBrokenSeams: it
// runs one suite against one broken implementation and is expected to fail.
func TestBrokenChild(t *testing.T) {
	kind, name, ok := strings.Cut(os.Getenv(brokenEnv), ":")
	switch {
	case !ok:
		t.Skip("runs only as the child process of TestSuitesCatchBrokenSeams")
	case kind == "locker":
		cfg := memLockerConfig(name)
		cfg.Timeout = 20 * time.Second
		lockmgrtest.RunLocker(t, cfg)
	case kind == "holds":
		lockmgrtest.RunHoldStore(t, holdConfig(name))
	default:
		lockmgrtest.RunStore(t, lockmgrtest.StoreConfig{
			NewStore: func(*testing.T) lockmgr.Store { return newMemStore(name) },
		})
	}
}

func TestSuitesCatchBrokenSeams(t *testing.T) {
	for kind, set := range map[string]map[string]broken{"locker": brokenLockers, "store": brokenStores, "holds": brokenHoldStores} {
		for name, b := range set {
			t.Run(kind+"/"+name, func(t *testing.T) {
				t.Parallel()
				cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenChild$", "-test.v", "-test.count=1", "-test.timeout=5m")
				cmd.Env = append(os.Environ(), brokenEnv+"="+kind+":"+name)
				out, err := cmd.CombinedOutput()
				if err == nil {
					t.Fatalf("the suite passed a %s %s:\n%s", name, kind, out)
				}
				for _, sub := range b.mustFail {
					if !strings.Contains(string(out), "--- FAIL: TestBrokenChild/"+sub+" ") {
						t.Errorf("the suite did not catch the %s %s in %s", name, kind, sub)
					}
				}
				for _, sub := range b.mustPass {
					if !strings.Contains(string(out), "--- PASS: TestBrokenChild/"+sub+" ") {
						t.Errorf("%s should pass for the %s %s", sub, name, kind)
					}
				}
				if t.Failed() {
					t.Logf("child output:\n%s", out)
				}
			})
		}
	}
}

// memBackend is a lock server in memory, shared by the Lockers of a test
// as a Redis is shared by processes.
type memBackend struct {
	mu   sync.Mutex
	held map[string]*memLease
	wake chan struct{} // closed and replaced on every release
}

func (b *memBackend) free(name string) {
	delete(b.held, name)
	close(b.wake)
	b.wake = make(chan struct{})
}

// lapse frees name as an expired TTL would, telling its holder.
func (b *memBackend) lapse(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if le := b.held[name]; le != nil {
		if le.l.broken != "never-lost" {
			close(le.lost)
		}
		b.free(name)
	}
}

type memLocker struct {
	b      *memBackend
	broken string
}

func (l *memLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	name = l.key(name)
	if err := ctx.Err(); err != nil && l.broken != "ignores-ctx" {
		return nil, fmt.Errorf("mem: lock %q: %w", name, err)
	}
	for {
		l.b.mu.Lock()
		if l.b.held[name] == nil || l.broken == "no-exclusion" {
			le := &memLease{l: l, name: name, lost: make(chan struct{})}
			l.b.held[name] = le
			l.b.mu.Unlock()
			return le, nil
		}
		wake := l.b.wake
		l.b.mu.Unlock()
		if l.broken == "ignores-ctx" {
			<-wake
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("mem: lock %q: %w", name, ctx.Err())
		}
	}
}

// key is the backend's name of the lock on name.
func (l *memLocker) key(name string) string {
	if l.broken == "folds-case" {
		return strings.ToLower(name)
	}
	return name
}

type memLease struct {
	l    *memLocker
	name string
	lost chan struct{}
}

func (le *memLease) Lost() <-chan struct{} { return le.lost }

func (le *memLease) Release(context.Context) error {
	b := le.l.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[le.name] != le && le.l.broken != "frees-any" {
		return errors.New("mem: release: the lock is not this lease's")
	}
	b.free(le.name)
	return nil
}

// memStore is a Store in memory; broken names the rule it breaks.
type memStore struct {
	broken string
	mu     sync.Mutex
	stock  map[string][2]int64 // stock, version
	ledger map[string]int64
}

func newMemStore(broken string) *memStore {
	return &memStore{broken: broken, stock: map[string][2]int64{}, ledger: map[string]int64{}}
}

func (s *memStore) begin(ctx context.Context, sku *string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil && s.broken != "ignores-ctx" {
		return nil, err
	}
	if s.broken == "folds-case" {
		*sku = strings.ToLower(*sku)
	}
	s.mu.Lock()
	return s.mu.Unlock, nil
}

func ledgerKey(sku string, dir driver.Direction, key string) string {
	return fmt.Sprintf("%d:%s:%s:%s", len(sku), sku, dir, key)
}

func (s *memStore) Init(ctx context.Context, sku string, qty int64) error {
	unlock, err := s.begin(ctx, &sku)
	if err != nil {
		return err
	}
	defer unlock()
	s.stock[sku] = [2]int64{qty, s.stock[sku][1] + 1}
	return nil
}

func (s *memStore) Get(ctx context.Context, sku string) (int64, error) {
	n, _, err := s.Read(ctx, sku)
	return n, err
}

func (s *memStore) Read(ctx context.Context, sku string) (int64, int64, error) {
	unlock, err := s.begin(ctx, &sku)
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	r, ok := s.stock[sku]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	return r[0], r[1], nil
}

func (s *memStore) Seen(ctx context.Context, sku string, dir driver.Direction, key string) (int64, bool, error) {
	unlock, err := s.begin(ctx, &sku)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	n, ok := s.ledger[ledgerKey(sku, dir, key)]
	return n, ok, nil
}

func (s *memStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	if s.broken == "separate-ledger" {
		return s.separate(ctx, sku, version, newStock, dir, key)
	}
	unlock, err := s.begin(ctx, &sku)
	if err != nil {
		return false, err
	}
	defer unlock()
	lk := ledgerKey(sku, dir, key)
	if _, dup := s.ledger[lk]; dup && key != "" {
		return false, inventory.ErrDuplicate
	}
	r, ok := s.stock[sku]
	if !ok || (r[1] != version && s.broken != "ignores-version") {
		return false, nil
	}
	s.stock[sku] = [2]int64{newStock, r[1] + 1}
	if key != "" {
		s.ledger[lk] = newStock
	}
	return true, nil
}

// separate records the key in a step of its own, after the stock write:
// two writers can both pass the check before either has recorded the key.
func (s *memStore) separate(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	if _, found, err := s.Seen(ctx, sku, dir, key); err != nil || found {
		return false, errors.Join(err, inventory.ErrDuplicate)
	}
	s.mu.Lock()
	r, ok := s.stock[sku]
	if !ok || r[1] != version {
		s.mu.Unlock()
		return false, nil
	}
	s.stock[sku] = [2]int64{newStock, r[1] + 1}
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	if key != "" {
		s.mu.Lock()
		s.ledger[ledgerKey(sku, dir, key)] = newStock
		s.mu.Unlock()
	}
	return true, nil
}
