// Package fakeorders is a small in-memory [inventory.OrderManager] for the
// decorators' tests: an inventorytest.Memory whose order calls move stock
// one line at a time under one mutex. It is not a reference for the order
// contract (the strategies' suite is); it is enough to see what a decorator
// passes through, counts or refuses.
package fakeorders

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/inventorytest"
)

// Orders is the fake. Calls counts every call that reached it.
type Orders struct {
	*inventorytest.Memory
	Calls atomic.Int64

	mu    sync.Mutex
	holds map[string]*hold
	now   func() time.Time
}

type hold struct {
	lines            []inventory.Line
	expires          time.Time
	confirmed, ended bool
}

// New returns an empty Orders on the clock now (time.Now if nil).
func New(now func() time.Time) *Orders {
	if now == nil {
		now = time.Now
	}
	return &Orders{Memory: inventorytest.NewMemory(0), holds: map[string]*hold{}, now: now}
}

var _ inventory.OrderManager = (*Orders)(nil)

// Reduce implements [inventory.StockManager].
func (o *Orders) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	o.Calls.Add(1)
	return o.Memory.Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (o *Orders) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	o.Calls.Add(1)
	return o.Memory.Return(ctx, sku, qty, opts...)
}

func (o *Orders) move(ctx context.Context, lines []inventory.Line, reduce bool) error {
	var short []inventory.Shortfall
	for _, l := range lines {
		n, err := o.Memory.Get(ctx, l.SKU)
		if err != nil {
			return err
		}
		if reduce && n < l.Qty {
			short = append(short, inventory.Shortfall{Line: l, Available: n})
		}
	}
	if short != nil {
		return &inventory.InsufficientError{Short: short}
	}
	for _, l := range lines {
		var err error
		if reduce {
			_, err = o.Memory.Reduce(ctx, l.SKU, l.Qty)
		} else {
			_, err = o.Memory.Return(ctx, l.SKU, l.Qty)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ReduceLines implements [inventory.OrderManager] (keys are ignored).
func (o *Orders) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return o.moveLines(ctx, lines, opts, true)
}

// ReturnLines implements [inventory.OrderManager] (keys are ignored).
func (o *Orders) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return o.moveLines(ctx, lines, opts, false)
}

// moveLines is ReduceLines (reduce) or ReturnLines.
func (o *Orders) moveLines(ctx context.Context, lines []inventory.Line, opts []inventory.Option, reduce bool) error {
	o.Calls.Add(1)
	if _, err := driver.ValidateLinesCall(lines, opts); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.move(ctx, lines, reduce)
}

// Reserve implements [inventory.OrderManager].
func (o *Orders) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	o.Calls.Add(1)
	if err := driver.ValidateReserve(id, lines, ttl); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holds[id] != nil {
		return fmt.Errorf("%w: hold %q", inventory.ErrDuplicate, id)
	}
	if err := o.move(ctx, lines, true); err != nil {
		return err
	}
	o.holds[id] = &hold{lines: lines, expires: o.now().Add(ttl)}
	return nil
}

// releaseLocked ends h and puts its units back.
func (o *Orders) releaseLocked(ctx context.Context, h *hold) error {
	h.ended = true
	return o.move(ctx, h.lines, false)
}

// Confirm implements [inventory.OrderManager].
func (o *Orders) Confirm(ctx context.Context, id string) error {
	return o.withHold(id, func(h *hold) error {
		switch {
		case h.confirmed:
			return fmt.Errorf("%w: hold %q", inventory.ErrDuplicate, id)
		case !h.ended && !o.now().Before(h.expires):
			if err := o.releaseLocked(ctx, h); err != nil {
				return err
			}
		}
		if h.ended {
			return fmt.Errorf("%w: hold %q", inventory.ErrHoldReleased, id)
		}
		h.confirmed = true
		return nil
	})
}

// Cancel implements [inventory.OrderManager].
func (o *Orders) Cancel(ctx context.Context, id string) error {
	return o.withHold(id, func(h *hold) error {
		switch {
		case h.confirmed:
			return fmt.Errorf("%w: hold %q", inventory.ErrHoldConfirmed, id)
		case h.ended:
			return nil
		}
		return o.releaseLocked(ctx, h)
	})
}

// withHold counts a call on hold id, checks id and runs f on its hold
// under the lock; an unknown id is ErrNotFound.
func (o *Orders) withHold(id string, f func(h *hold) error) error {
	o.Calls.Add(1)
	if err := driver.ValidateHoldID(id); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.holds[id]
	if h == nil {
		return fmt.Errorf("%w: hold %q", inventory.ErrNotFound, id)
	}
	return f(h)
}

// Held implements [inventory.OrderManager].
func (o *Orders) Held(ctx context.Context, sku string) (int64, error) {
	o.Calls.Add(1)
	if _, err := o.Memory.Get(ctx, sku); err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, h := range o.holds {
		if h.ended || h.confirmed {
			continue
		}
		for _, l := range h.lines {
			if l.SKU == sku {
				n += l.Qty
			}
		}
	}
	return n, nil
}

// Sweep implements [inventory.OrderManager].
func (o *Orders) Sweep(ctx context.Context) (int, error) {
	o.Calls.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, h := range o.holds {
		if !h.ended && !h.confirmed && !o.now().Before(h.expires) {
			if err := o.releaseLocked(ctx, h); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
