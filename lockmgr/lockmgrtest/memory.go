package lockmgrtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/lockmgr"
)

// MemoryStore is a [lockmgr.HoldStore] in the memory of one process: the
// reference the suites are checked against, and a store for tests of a
// Locker or of code above a Manager. Its clock is the process's. It is
// safe for concurrent use. Make one with [NewMemoryStore].
type MemoryStore struct {
	keyTTL time.Duration
	broken string // the rule a deliberately broken copy breaks (tests)

	mu     sync.Mutex
	stock  map[string]*memSKU
	ledger map[string]time.Time // ledger key -> expiry
	remain map[string]int64     // ledger key -> remaining
	orders map[string]*memOrder
}

type memSKU struct {
	stock, version, held int64
	lines                map[string]memLine // id -> line
}

type memLine struct {
	qty     int64
	expires time.Time
}

type memOrder struct {
	o       lockmgr.Order
	abandon time.Time
	kept    time.Time // zero until done
}

var _ lockmgr.HoldStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore that keeps idempotency keys
// and done orders for keyTTL ([inventory.DefaultKeyTTL] when keyTTL is not
// positive).
func NewMemoryStore(keyTTL time.Duration) *MemoryStore {
	if keyTTL <= 0 {
		keyTTL = inventory.DefaultKeyTTL
	}
	return &MemoryStore{keyTTL: keyTTL, stock: map[string]*memSKU{}, ledger: map[string]time.Time{},
		remain: map[string]int64{}, orders: map[string]*memOrder{}}
}

// now is the store's clock, to the millisecond as a backend's.
func now() time.Time { return time.UnixMilli(time.Now().UnixMilli()) }

func (s *MemoryStore) lock(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil && s.broken != "ignores-ctx" {
		return nil, err
	}
	s.mu.Lock()
	return s.mu.Unlock, nil
}

func memLedgerKey(sku string, dir driver.Direction, key string) string {
	return fmt.Sprintf("%d:%s:%s:%s", len(sku), sku, dir, key)
}

// Init implements [lockmgr.Store].
func (s *MemoryStore) Init(ctx context.Context, sku string, qty int64) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	r := s.stock[sku]
	if r == nil {
		r = &memSKU{lines: map[string]memLine{}}
		s.stock[sku] = r
	}
	r.stock, r.version = qty, r.version+1
	return nil
}

// Get implements [lockmgr.Store].
func (s *MemoryStore) Get(ctx context.Context, sku string) (int64, error) {
	n, _, err := s.Read(ctx, sku)
	return n, err
}

// Read implements [lockmgr.Store].
func (s *MemoryStore) Read(ctx context.Context, sku string) (stock, version int64, err error) {
	stock, version, _, _, err = s.ReadHolds(ctx, sku, 1)
	return stock, version, err
}

// Seen implements [lockmgr.Store].
func (s *MemoryStore) Seen(ctx context.Context, sku string, dir driver.Direction, key string) (int64, bool, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	lk := memLedgerKey(sku, dir, key)
	if exp, ok := s.ledger[lk]; ok && now().Before(exp) {
		return s.remain[lk], true, nil
	}
	return 0, false, nil
}

// CompareAndSet implements [lockmgr.Store].
func (s *MemoryStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	lk := memLedgerKey(sku, dir, key)
	if exp, ok := s.ledger[lk]; ok && key != "" && now().Before(exp) {
		return false, fmt.Errorf("%w: %s %q key %q", inventory.ErrDuplicate, dir, sku, key)
	}
	r := s.stock[sku]
	if r == nil || r.version != version {
		return false, nil
	}
	r.stock, r.version = newStock, r.version+1
	if key != "" {
		s.ledger[lk], s.remain[lk] = now().Add(s.keyTTL), newStock
	}
	return true, nil
}

// ReadHolds implements [lockmgr.HoldStore].
func (s *MemoryStore) ReadHolds(ctx context.Context, sku string, max int) (stock, version, held int64, expired []string, err error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	defer unlock()
	r := s.stock[sku]
	if r == nil {
		return 0, 0, 0, nil, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	t := now()
	var ds []due
	for id, l := range r.lines {
		if !t.Before(l.expires) && s.broken != "never-expires" {
			ds = append(ds, due{id, l.expires})
		}
	}
	for _, d := range earliest(ds, max) {
		expired = append(expired, d.id)
	}
	return r.stock, r.version, r.held, expired, nil
}

// Hold implements [lockmgr.HoldStore].
func (s *MemoryStore) Hold(ctx context.Context, sku string, version, newStock int64, id string, qty int64, expires time.Time) (bool, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	r := s.stock[sku]
	if r == nil {
		return false, nil
	}
	if _, dup := r.lines[id]; dup {
		return false, fmt.Errorf("%w: line %q of order %q", inventory.ErrDuplicate, sku, id)
	}
	if r.version != version && s.broken != "ignores-version" {
		return false, nil
	}
	r.stock, r.version = newStock, r.version+1
	r.lines[id] = memLine{qty, expires}
	if s.broken != "no-held-total" {
		r.held += qty
	}
	return true, nil
}

// Unhold implements [lockmgr.HoldStore].
func (s *MemoryStore) Unhold(ctx context.Context, sku, id string, sold bool) (int64, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	r := s.stock[sku]
	if r == nil {
		return 0, nil
	}
	l, ok := r.lines[id]
	if !ok {
		return 0, nil
	}
	if s.broken != "double-release" {
		delete(r.lines, id)
	}
	r.held -= l.qty
	if !sold {
		r.stock = min(r.stock+l.qty, inventory.MaxStock)
		r.version++
	}
	return l.qty, nil
}

// Held implements [lockmgr.HoldStore].
func (s *MemoryStore) Held(ctx context.Context, sku string) (int64, error) {
	_, _, held, _, err := s.ReadHolds(ctx, sku, 1)
	return held, err
}

// order returns the live record of id; the caller holds s.mu.
func (s *MemoryStore) order(id string, t time.Time) *memOrder {
	o := s.orders[id]
	if o != nil && o.o.Done && !t.Before(o.kept) {
		delete(s.orders, id)
		return nil
	}
	return o
}

// CreateOrder implements [lockmgr.HoldStore].
func (s *MemoryStore) CreateOrder(ctx context.Context, id string, lines []inventory.Line, ttl, grace time.Duration) (lockmgr.Order, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return lockmgr.Order{}, err
	}
	defer unlock()
	t := now()
	if s.order(id, t) != nil {
		return lockmgr.Order{}, fmt.Errorf("%w: order %q", inventory.ErrDuplicate, id)
	}
	exp := t.Add(ttl).Truncate(time.Millisecond)
	abandon := t.Add(grace) // grace after it is recorded, whatever its expiry
	if s.broken == "abandon-after-expiry" {
		abandon = exp.Add(grace) // the rule before: safe, only slower
	}
	o := &memOrder{o: lockmgr.Order{ID: id, Lines: slices.Clone(lines), State: lockmgr.OrderHeld, Expires: exp},
		abandon: abandon}
	s.orders[id] = o
	return copyOrder(o.o), nil
}

func copyOrder(o lockmgr.Order) lockmgr.Order {
	o.Lines = slices.Clone(o.Lines)
	return o
}

// Order implements [lockmgr.HoldStore].
func (s *MemoryStore) Order(ctx context.Context, id string) (lockmgr.Order, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return lockmgr.Order{}, err
	}
	defer unlock()
	o := s.order(id, now())
	if o == nil {
		return lockmgr.Order{}, fmt.Errorf("%w: order %q", inventory.ErrNotFound, id)
	}
	return copyOrder(o.o), nil
}

// UpdateOrder implements [lockmgr.HoldStore].
func (s *MemoryStore) UpdateOrder(ctx context.Context, id string, step lockmgr.OrderStep) (lockmgr.Order, bool, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return lockmgr.Order{}, false, err
	}
	defer unlock()
	t := now()
	mo := s.order(id, t)
	if mo == nil {
		return lockmgr.Order{}, false, fmt.Errorf("%w: order %q", inventory.ErrNotFound, id)
	}
	o := &mo.o
	held := o.State == lockmgr.OrderHeld
	past := !t.Before(o.Expires) && s.broken != "confirm-after-expiry"
	var apply func()
	switch {
	case step == lockmgr.StepComplete && held && !o.Complete:
		apply = func() { o.Complete = true }
	case step == lockmgr.StepConfirm && held && o.Complete:
		apply = func() { o.State = pick(past, lockmgr.OrderExpired, lockmgr.OrderConfirmed) }
	case step == lockmgr.StepCancel && held && o.Complete:
		apply = func() { o.State = pick(past, lockmgr.OrderExpired, lockmgr.OrderCancelled) }
	case step == lockmgr.StepExpire && held && s.broken != "never-expires" &&
		(o.Complete && !t.Before(o.Expires) || !o.Complete && !t.Before(mo.abandon)):
		apply = func() { o.State = lockmgr.OrderExpired }
	case step == lockmgr.StepFinish && !held && !o.Done:
		apply = func() {
			if !o.Complete {
				delete(s.orders, id)
				return
			}
			o.Done, mo.kept = true, t.Add(s.keyTTL)
		}
	case step == lockmgr.StepAbort && held && !o.Complete:
		apply = func() { delete(s.orders, id) }
	}
	if apply == nil {
		return copyOrder(*o), false, nil
	}
	if s.broken == "split-steps" { // checks, then writes in a step of its own
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
		s.mu.Lock()
	}
	apply()
	return copyOrder(*o), true, nil
}

func pick[T any](c bool, yes, no T) T {
	if c {
		return yes
	}
	return no
}

// ExpiredOrders implements [lockmgr.HoldStore].
func (s *MemoryStore) ExpiredOrders(ctx context.Context, max int) ([]string, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	t := now()
	var ds []due
	for id, mo := range s.orders {
		if mo.o.Done {
			continue
		}
		at := mo.o.Expires
		if mo.o.State == lockmgr.OrderHeld && !mo.o.Complete {
			at = mo.abandon
		}
		if !t.Before(at) {
			ds = append(ds, due{id, at})
		}
	}
	first := earliest(ds, max)
	ids := make([]string, 0, len(first))
	for _, d := range first {
		ids = append(ids, d.id)
	}
	return ids, nil
}

// due is a line or order whose expiry (at) has passed.
type due struct {
	id string
	at time.Time
}

// earliest sorts ds by expiry and returns the first max of them.
func earliest(ds []due, max int) []due {
	slices.SortFunc(ds, func(a, b due) int { return a.at.Compare(b.at) })
	return ds[:min(len(ds), max)]
}
