// Package refusals lets a process refuse a Reduce without a round trip when
// its backend refused a Reduce of the same SKU less than a TTL ago and the
// stock it reported then is below the quantity asked: once a flash sale is
// sold out, the buyers' calls are refused in the process.
//
// A refusal records the stock the backend saw, in a fixed table of slots
// (a SKU hashes to one; a later SKU of a slot takes the entry over), so the
// memory is bounded however many SKUs are refused. Every call that may add
// units (a Return, an Init) bumps its slot's epoch before it is sent and
// after it returns: that drops what was recorded there, and stops a refusal
// in flight meanwhile from recording a stock the call may already have
// raised. Units added by other processes are not seen: a refusal may be
// stale by up to the TTL, never more, and it never lets a call succeed.
package refusals

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// MaxTTL bounds the staleness a Table may be given.
const MaxTTL = 10 * time.Second

// slots is the size of the table: 16384 entries, a few hundred KB.
const slots = 1 << 14

// Table is the refusals of one Manager. The zero Table is not usable; make
// one with [New]. Its methods are safe for concurrent use.
type Table struct {
	ttl   time.Duration
	seed  maphash.Seed
	slots [slots]slot
}

type slot struct {
	epoch atomic.Uint64
	last  atomic.Pointer[refusal]
}

// refusal says that the backend held stock units of sku at some moment
// after the slot was at epoch, until is that moment + the TTL.
type refusal struct {
	sku   string
	stock int64
	until time.Time
	epoch uint64
}

// New returns an empty Table whose refusals hold for ttl.
func New(ttl time.Duration) *Table { return &Table{ttl: ttl, seed: maphash.MakeSeed()} }

func (t *Table) slot(sku string) *slot {
	return &t.slots[maphash.String(t.seed, sku)%slots]
}

// Check returns the stock of a refusal of sku less than the TTL old when a
// Reduce of qty cannot fit it; ok is false when the call must go to the
// backend.
func (t *Table) Check(sku string, qty int64) (stock int64, ok bool) {
	s := t.slot(sku)
	e := s.last.Load()
	if e == nil || e.sku != sku || qty <= e.stock || e.epoch != s.epoch.Load() || !time.Now().Before(e.until) {
		return 0, false
	}
	return e.stock, true
}

// Epoch returns the epoch of sku's slot, to pass to [Table.Refused]; take
// it before sending the Reduce.
func (t *Table) Epoch(sku string) uint64 { return t.slot(sku).epoch.Load() }

// Refused records that a Reduce of sku sent at sent, when the slot was at
// epoch, found stock units and was refused. It records nothing when a call
// that may add units ran meanwhile.
func (t *Table) Refused(sku string, stock int64, sent time.Time, epoch uint64) {
	s := t.slot(sku)
	if s.epoch.Load() == epoch {
		s.last.Store(&refusal{sku: sku, stock: stock, until: sent.Add(t.ttl), epoch: epoch})
	}
}

// Added drops what is recorded of sku: a call that may add units to it is
// coming, or has been. Call it before sending such a call and after it
// returns.
func (t *Table) Added(sku string) { t.slot(sku).epoch.Add(1) }
