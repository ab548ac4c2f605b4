package faulttest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// Deadlined is a StockManager for stall tests. Every Reduce and Return that
// starts while Stalled is true runs under [CheckLate] with the deadline D
// (from the moment of the call, in place of the caller's ctx), failing T
// when it returns more than inventory.DeadlineSlack late. Other calls, and
// Init and Get, go straight through with the caller's ctx.
type Deadlined struct {
	inventory.StockManager
	T testing.TB
	D time.Duration

	// Stalled selects the calls to check: set it a little before the
	// fault, so that calls in flight when it strikes are checked too.
	Stalled atomic.Bool

	mu      sync.Mutex
	checked int
	late    time.Duration // the most a checked call was late
}

func (d *Deadlined) check(ctx context.Context, dir driver.Direction, sku string, opts []inventory.Option, call func(ctx context.Context) error) error {
	if !d.Stalled.Load() {
		return call(ctx)
	}
	what := fmt.Sprintf("%s %q key %q during the stall", dir, sku, driver.Apply(opts).Key)
	own, err := CheckLate(d.T, what, d.D, call)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checked++
	d.late = max(d.late, own)
	return err
}

// Reduce implements [inventory.StockManager], under CheckLate while Stalled.
func (d *Deadlined) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (rem int64, err error) {
	err = d.check(ctx, driver.DirReduce, sku, opts, func(ctx context.Context) error {
		rem, err = d.StockManager.Reduce(ctx, sku, qty, opts...)
		return err
	})
	return rem, err
}

// Return implements [inventory.StockManager], under CheckLate while Stalled.
func (d *Deadlined) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (rem int64, err error) {
	err = d.check(ctx, driver.DirReturn, sku, opts, func(ctx context.Context) error {
		rem, err = d.StockManager.Return(ctx, sku, qty, opts...)
		return err
	})
	return rem, err
}

// Report returns how many calls were checked, and the most any of them
// returned past its deadline beyond a bare timer's lateness (zero when
// every one returned in time).
func (d *Deadlined) Report() (checked int, late time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checked, d.late
}

// String summarises Report for a test log.
func (d *Deadlined) String() string {
	checked, late := d.Report()
	return fmt.Sprintf("%d calls checked with a %v deadline; the most one ran past it: %v beyond a bare timer's lateness; the contract allows %v",
		checked, d.D, late.Round(time.Millisecond), inventory.DeadlineSlack)
}
