package lockmgr_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/lockmgr"
)

// fakeLocker is an in-process lock per name that lapses after ttl (if ttl
// > 0) without telling its holder, as a paused holder's lock would.
// Waiters queue in order.
type fakeLocker struct {
	ttl time.Duration

	mu    sync.Mutex
	names map[string]*fakeName

	acquired, released atomic.Int64
}

type fakeName struct {
	sem chan struct{} // holds a token while locked
	cur *fakeLease
}

type fakeLease struct {
	l     *fakeLocker
	n     *fakeName
	timer *time.Timer
	lost  chan struct{}
	done  atomic.Bool
}

func newFakeLocker(ttl time.Duration) *fakeLocker {
	return &fakeLocker{ttl: ttl, names: map[string]*fakeName{}}
}

func (l *fakeLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	l.mu.Lock()
	n := l.names[name]
	if n == nil {
		n = &fakeName{sem: make(chan struct{}, 1)}
		l.names[name] = n
	}
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake lock: %w", err)
	}
	select {
	case n.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("fake lock: %w", ctx.Err())
	}
	le := &fakeLease{l: l, n: n, lost: make(chan struct{})}
	l.mu.Lock()
	n.cur = le
	l.mu.Unlock()
	if l.ttl > 0 {
		le.timer = time.AfterFunc(l.ttl, le.free)
	}
	l.acquired.Add(1)
	return le, nil
}

// free unlocks the name if le still holds it.
func (le *fakeLease) free() {
	le.l.mu.Lock()
	defer le.l.mu.Unlock()
	if le.n.cur == le {
		le.n.cur = nil
		<-le.n.sem
	}
}

func (le *fakeLease) Lost() <-chan struct{} { return le.lost }

func (le *fakeLease) Release(context.Context) error {
	if le.done.Swap(true) {
		panic("lease released twice")
	}
	if le.timer != nil {
		le.timer.Stop()
	}
	le.free()
	le.l.released.Add(1)
	return nil
}

// memStore is a Store in memory. Ledger entries never expire.
type memStore struct {
	mu     sync.Mutex
	stock  map[string][2]int64 // stock, version
	ledger map[string]int64
}

func newMemStore() *memStore {
	return &memStore{stock: map[string][2]int64{}, ledger: map[string]int64{}}
}

func ledgerKey(sku string, dir driver.Direction, key string) string {
	return fmt.Sprintf("%d:%s:%s:%s", len(sku), sku, dir, key)
}

func (s *memStore) Init(ctx context.Context, sku string, qty int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stock[sku] = [2]int64{qty, s.stock[sku][1] + 1}
	return nil
}

func (s *memStore) Get(ctx context.Context, sku string) (int64, error) {
	n, _, err := s.Read(ctx, sku)
	return n, err
}

func (s *memStore) Read(ctx context.Context, sku string) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.stock[sku]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	return r[0], r[1], nil
}

func (s *memStore) Seen(ctx context.Context, sku string, dir driver.Direction, key string) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.ledger[ledgerKey(sku, dir, key)]
	return n, ok, nil
}

func (s *memStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ledger[ledgerKey(sku, dir, key)]; ok && key != "" {
		return false, inventory.ErrDuplicate
	}
	r, ok := s.stock[sku]
	if !ok || r[1] != version {
		return false, nil
	}
	s.stock[sku] = [2]int64{newStock, version + 1}
	if key != "" {
		s.ledger[ledgerKey(sku, dir, key)] = newStock
	}
	return true, nil
}

// blindStore writes unconditionally: its CompareAndSet ignores the version
// it is given. It shows what the compare-and-set prevents.
type blindStore struct{ lockmgr.Store }

func (b blindStore) CompareAndSet(ctx context.Context, sku string, _, newStock int64, dir driver.Direction, key string) (bool, error) {
	_, version, err := b.Read(ctx, sku)
	if err != nil {
		return false, err
	}
	return b.Store.CompareAndSet(ctx, sku, version, newStock, dir, key)
}
