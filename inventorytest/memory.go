package inventorytest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stockkit/inventory"
)

// Memory is a correct in-memory [inventory.StockManager], the reference the
// suite is checked against. Use it in your own unit tests where a real
// backend is not the point. It holds everything in one process; it is not a
// strategy for production.
type Memory struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	stock map[string]int64
	keys  map[memKey]memEntry
}

type memKey struct {
	sku, key string
	dir      inventory.Direction
}

type memEntry struct {
	remaining int64
	expires   time.Time
}

var _ inventory.StockManager = (*Memory)(nil)

// NewMemory returns an empty Memory that remembers idempotency keys for ttl
// (inventory.DefaultKeyTTL if ttl <= 0).
func NewMemory(ttl time.Duration) *Memory {
	if ttl <= 0 {
		ttl = inventory.DefaultKeyTTL
	}
	return &Memory{ttl: ttl, now: time.Now, stock: map[string]int64{}, keys: map[memKey]memEntry{}}
}

// Init implements [inventory.StockManager].
func (m *Memory) Init(ctx context.Context, sku string, qty int64) error {
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inventorytest: init: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stock[sku] = qty
	return nil
}

// Get implements [inventory.StockManager].
func (m *Memory) Get(ctx context.Context, sku string) (int64, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("inventorytest: get: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.stock[sku]
	if !ok {
		return 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	return n, nil
}

// Reduce implements [inventory.StockManager].
func (m *Memory) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, inventory.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (m *Memory) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, inventory.DirReturn, opts)
}

func (m *Memory) move(ctx context.Context, sku string, qty int64, dir inventory.Direction, opts []inventory.Option) (int64, error) {
	o, err := inventory.ValidateMove(sku, qty, opts)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("inventorytest: %s: %w", dir, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	k := memKey{sku: sku, key: o.Key, dir: dir}
	if o.Key != "" {
		if e, ok := m.keys[k]; ok && now.Before(e.expires) {
			return e.remaining, fmt.Errorf("%w: %s %q key %q", inventory.ErrDuplicate, dir, sku, o.Key)
		}
	}
	cur, ok := m.stock[sku]
	if !ok {
		return 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	if dir == inventory.DirReduce {
		if cur < qty {
			return cur, fmt.Errorf("%w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, cur, qty)
		}
		cur -= qty
	} else {
		if err := inventory.CheckReturn(cur, qty); err != nil {
			return cur, err
		}
		cur += qty
	}
	m.stock[sku] = cur
	if o.Key != "" {
		m.pruneLocked(now)
		m.keys[k] = memEntry{remaining: cur, expires: now.Add(m.ttl)}
	}
	return cur, nil
}

// pruneLocked forgets expired keys once the map has grown, so memory stays
// bounded by the keys of one TTL.
func (m *Memory) pruneLocked(now time.Time) {
	if len(m.keys) < 1024 || len(m.keys)&(len(m.keys)-1) != 0 {
		return
	}
	for k, e := range m.keys {
		if !now.Before(e.expires) {
			delete(m.keys, k)
		}
	}
}
