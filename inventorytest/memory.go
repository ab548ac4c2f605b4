package inventorytest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// Memory is a correct in-memory [inventory.StockManager] and
// [inventory.OrderManager], the reference the suite is checked against. Use
// it in your own unit tests where a real backend is not the point. It holds
// everything in one process; it is not a strategy for production.
//
// Its holds expire on the process's clock. Expired holds of a SKU are
// released by the next call that moves the SKU, by Confirm and Cancel of the
// hold, and by Sweep; Get and Held never release anything. A hold id and a
// lines call's idempotency key are remembered for the key TTL given to
// NewMemory after the hold ends or the call takes effect.
type Memory struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	stock map[string]int64
	keys  map[memKey]memEntry

	held     map[string]int64               // units in unreleased holds, per SKU
	holds    map[string]*memHold            // by id: unreleased and ended holds
	live     map[string]map[string]struct{} // per SKU: ids of its unreleased holds
	lineKeys map[memKey]time.Time           // keys of the lines calls (sku ""), until when
}

type holdState int

const (
	holdLive holdState = iota
	holdConfirmed
	holdCancelled
	holdExpired
)

type memHold struct {
	lines   []inventory.Line
	expires time.Time
	state   holdState
	ended   time.Time // when it left holdLive
}

type memKey struct {
	sku, key string
	dir      driver.Direction
}

type memEntry struct {
	remaining int64
	expires   time.Time
}

var (
	_ inventory.StockManager = (*Memory)(nil)
	_ inventory.OrderManager = (*Memory)(nil)
)

// NewMemory returns an empty Memory that remembers idempotency keys for ttl
// (inventory.DefaultKeyTTL if ttl <= 0).
func NewMemory(ttl time.Duration) *Memory {
	if ttl <= 0 {
		ttl = inventory.DefaultKeyTTL
	}
	return &Memory{
		ttl: ttl, now: time.Now,
		stock: map[string]int64{}, keys: map[memKey]memEntry{},
		held: map[string]int64{}, holds: map[string]*memHold{},
		live: map[string]map[string]struct{}{}, lineKeys: map[memKey]time.Time{},
	}
}

// Init implements [inventory.StockManager].
func (m *Memory) Init(ctx context.Context, sku string, qty int64) error {
	if err := driver.ValidateInit(sku, qty); err != nil {
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
	if err := driver.ValidateSKU(sku); err != nil {
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
	return m.move(ctx, sku, qty, driver.DirReduce, opts)
}

// Return implements [inventory.StockManager].
func (m *Memory) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.move(ctx, sku, qty, driver.DirReturn, opts)
}

func (m *Memory) move(ctx context.Context, sku string, qty int64, dir driver.Direction, opts []inventory.Option) (int64, error) {
	o, err := driver.ValidateMove(sku, qty, opts)
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
	if m.releaseExpiredLocked(now, sku) > 0 {
		cur = m.stock[sku]
	}
	if dir == driver.DirReduce {
		if cur < qty {
			return cur, fmt.Errorf("%w: %q has %d, asked %d", inventory.ErrInsufficientStock, sku, cur, qty)
		}
		cur -= qty
	} else {
		if err := driver.CheckReturn(cur, qty); err != nil {
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

// ReduceLines implements [inventory.OrderManager].
func (m *Memory) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.moveLines(ctx, lines, driver.DirReduce, opts)
}

// ReturnLines implements [inventory.OrderManager].
func (m *Memory) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return m.moveLines(ctx, lines, driver.DirReturn, opts)
}

func (m *Memory) moveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, opts []inventory.Option) error {
	o, err := driver.ValidateLinesCall(lines, opts)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inventorytest: %s lines: %w", dir, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	k := memKey{key: o.Key, dir: dir}
	if o.Key != "" {
		if exp, ok := m.lineKeys[k]; ok && now.Before(exp) {
			return fmt.Errorf("%w: %s lines key %q", inventory.ErrDuplicate, dir, o.Key)
		}
	}
	if err := m.prepareLocked(now, lines); err != nil {
		return err
	}
	if dir == driver.DirReduce {
		if err := m.shortLocked(lines); err != nil {
			return err
		}
		for _, l := range lines {
			m.stock[l.SKU] -= l.Qty
		}
	} else {
		for _, l := range lines {
			if err := driver.CheckReturn(m.stock[l.SKU], l.Qty); err != nil {
				return fmt.Errorf("%q: %w", l.SKU, err)
			}
		}
		for _, l := range lines {
			m.stock[l.SKU] += l.Qty
		}
	}
	if o.Key != "" {
		m.pruneLinesLocked(now)
		m.lineKeys[k] = now.Add(m.ttl)
	}
	return nil
}

// prepareLocked checks that every SKU of lines exists and releases their
// expired holds.
func (m *Memory) prepareLocked(now time.Time, lines []inventory.Line) error {
	for _, l := range lines {
		if _, ok := m.stock[l.SKU]; !ok {
			return fmt.Errorf("%w: %q", inventory.ErrNotFound, l.SKU)
		}
	}
	for _, l := range lines {
		m.releaseExpiredLocked(now, l.SKU)
	}
	return nil
}

// shortLocked returns an *inventory.InsufficientError listing every line
// that does not fit, or nil.
func (m *Memory) shortLocked(lines []inventory.Line) error {
	var short []inventory.Shortfall
	for _, l := range lines {
		if have := m.stock[l.SKU]; have < l.Qty {
			short = append(short, inventory.Shortfall{Line: l, Available: have})
		}
	}
	if short != nil {
		return &inventory.InsufficientError{Short: short}
	}
	return nil
}

// Reserve implements [inventory.OrderManager].
func (m *Memory) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	if err := driver.ValidateReserve(id, lines, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inventorytest: reserve: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.holdLocked(now, id) != nil {
		return fmt.Errorf("%w: hold %q", inventory.ErrDuplicate, id)
	}
	if err := m.prepareLocked(now, lines); err != nil {
		return err
	}
	if err := m.shortLocked(lines); err != nil {
		return err
	}
	h := &memHold{lines: slices.Clone(lines), expires: now.Add(ttl)}
	for _, l := range lines {
		m.stock[l.SKU] -= l.Qty
		m.held[l.SKU] += l.Qty
		if m.live[l.SKU] == nil {
			m.live[l.SKU] = map[string]struct{}{}
		}
		m.live[l.SKU][id] = struct{}{}
	}
	m.pruneHoldsLocked(now)
	m.holds[id] = h
	return nil
}

// Confirm implements [inventory.OrderManager].
func (m *Memory) Confirm(ctx context.Context, id string) error {
	h, now, unlock, err := m.lookup(ctx, "confirm", id)
	if err != nil {
		return err
	}
	defer unlock()
	switch h.state {
	case holdConfirmed:
		return fmt.Errorf("%w: hold %q is confirmed", inventory.ErrDuplicate, id)
	case holdCancelled, holdExpired:
		return fmt.Errorf("%w: hold %q", inventory.ErrHoldReleased, id)
	}
	if !now.Before(h.expires) {
		m.releaseLocked(now, id, h, holdExpired)
		return fmt.Errorf("%w: hold %q expired", inventory.ErrHoldReleased, id)
	}
	for _, l := range h.lines {
		m.held[l.SKU] -= l.Qty
		delete(m.live[l.SKU], id)
	}
	h.state, h.ended = holdConfirmed, now
	return nil
}

// Cancel implements [inventory.OrderManager].
func (m *Memory) Cancel(ctx context.Context, id string) error {
	h, now, unlock, err := m.lookup(ctx, "cancel", id)
	if err != nil {
		return err
	}
	defer unlock()
	switch h.state {
	case holdConfirmed:
		return fmt.Errorf("%w: hold %q", inventory.ErrHoldConfirmed, id)
	case holdLive:
		state := holdCancelled
		if !now.Before(h.expires) {
			state = holdExpired
		}
		m.releaseLocked(now, id, h, state)
	}
	return nil
}

// lookup validates id, checks ctx, locks m and finds the hold. On success
// the caller must call unlock.
func (m *Memory) lookup(ctx context.Context, what, id string) (h *memHold, now time.Time, unlock func(), err error) {
	if err := driver.ValidateHoldID(id); err != nil {
		return nil, now, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, now, nil, fmt.Errorf("inventorytest: %s: %w", what, err)
	}
	m.mu.Lock()
	now = m.now()
	if h = m.holdLocked(now, id); h == nil {
		m.mu.Unlock()
		return nil, now, nil, fmt.Errorf("%w: hold %q", inventory.ErrHoldNotFound, id)
	}
	return h, now, m.mu.Unlock, nil
}

// holdLocked returns the hold with id, or nil if there is none or it ended
// more than the key TTL ago.
func (m *Memory) holdLocked(now time.Time, id string) *memHold {
	h := m.holds[id]
	if h != nil && h.state != holdLive && !now.Before(h.ended.Add(m.ttl)) {
		delete(m.holds, id)
		return nil
	}
	return h
}

// releaseLocked gives the units of the live hold h back and ends it.
func (m *Memory) releaseLocked(now time.Time, id string, h *memHold, state holdState) {
	for _, l := range h.lines {
		m.stock[l.SKU] += l.Qty
		m.held[l.SKU] -= l.Qty
		delete(m.live[l.SKU], id)
	}
	h.state, h.ended = state, now
}

// releaseExpiredLocked releases the expired holds of sku and returns how
// many it released.
func (m *Memory) releaseExpiredLocked(now time.Time, sku string) int {
	n := 0
	for id := range m.live[sku] {
		if h := m.holds[id]; !now.Before(h.expires) {
			m.releaseLocked(now, id, h, holdExpired)
			n++
		}
	}
	return n
}

// Held implements [inventory.OrderManager].
func (m *Memory) Held(ctx context.Context, sku string) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("inventorytest: held: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.stock[sku]; !ok {
		return 0, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	return m.held[sku], nil
}

// Sweep implements [inventory.OrderManager].
func (m *Memory) Sweep(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("inventorytest: sweep: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	n := 0
	for id, h := range m.holds {
		if h.state == holdLive && !now.Before(h.expires) {
			m.releaseLocked(now, id, h, holdExpired)
			n++
		}
	}
	return n, nil
}

// pruneHoldsLocked forgets holds that ended more than the key TTL ago, once
// the map has grown.
func (m *Memory) pruneHoldsLocked(now time.Time) {
	if len(m.holds) < 1024 || len(m.holds)&(len(m.holds)-1) != 0 {
		return
	}
	for id := range m.holds {
		m.holdLocked(now, id)
	}
}

// pruneLinesLocked forgets expired keys of lines calls, once the map has
// grown.
func (m *Memory) pruneLinesLocked(now time.Time) {
	if len(m.lineKeys) < 1024 || len(m.lineKeys)&(len(m.lineKeys)-1) != 0 {
		return
	}
	for k, exp := range m.lineKeys {
		if !now.Before(exp) {
			delete(m.lineKeys, k)
		}
	}
}
