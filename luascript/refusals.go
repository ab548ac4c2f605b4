package luascript

import (
	"sync/atomic"
	"time"

	"github.com/stockkit/inventory/internal/rediskeys"
)

// Local refusals (WithRefusals). A Reduce that Redis refused leaves the
// stock it saw in the slot of its SKU; until that is stale, a Reduce of
// more than that stock on that SKU is refused without a round trip. The
// slots are a fixed table (one entry per Cluster slot, a later SKU of a
// slot taking the entry over), so memory is bounded (16384 entries, a few
// hundred KB) however many SKUs are refused. A local Return or Init of a SKU bumps its slot's epoch
// before it is sent and after it returns, which drops what was left there
// and stops any refusal in flight from leaving a stock that the Return may
// already have raised.

const refusalSlots = rediskeys.Slots

// refusals is the table of recent refusals.
type refusals struct {
	ttl   time.Duration
	slots [refusalSlots]refusalSlot
}

type refusalSlot struct {
	epoch atomic.Uint64
	last  atomic.Pointer[refusal]
}

// refusal says that Redis held stock units of sku at some moment after
// seen, which is an epoch of the slot.
type refusal struct {
	sku   string
	stock int64
	until time.Time // seen + ttl
	epoch uint64
}

func (r *refusals) slot(sku string) *refusalSlot {
	return &r.slots[rediskeys.Slot(sku)]
}

// check returns the stock of a recent refusal of sku when a Reduce of qty
// cannot fit it.
func (r *refusals) check(sku string, qty int64) (int64, bool) {
	s := r.slot(sku)
	e := s.last.Load()
	if e == nil || e.sku != sku || qty <= e.stock || e.epoch != s.epoch.Load() || !time.Now().Before(e.until) {
		return 0, false
	}
	return e.stock, true
}

// epoch returns the epoch of sku's slot, to pass to refused.
func (r *refusals) epoch(sku string) uint64 { return r.slot(sku).epoch.Load() }

// refused records that a Reduce of sku sent at sent (when the slot was at
// epoch) found stock units.
func (r *refusals) refused(sku string, stock int64, sent time.Time, epoch uint64) {
	s := r.slot(sku)
	if s.epoch.Load() == epoch {
		s.last.Store(&refusal{sku: sku, stock: stock, until: sent.Add(r.ttl), epoch: epoch})
	}
}

// added drops what is known of sku: a call that may add units is coming
// or has been.
func (r *refusals) added(sku string) { r.slot(sku).epoch.Add(1) }
