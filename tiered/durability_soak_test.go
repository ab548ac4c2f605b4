//go:build soak

package tiered

import (
	"fmt"
	"testing"
)

// span is the min-max of a figure over rounds.
type span struct {
	lo, hi int64
	n      int
}

func (s *span) add(v int64) {
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	if s.n == 0 || v > s.hi {
		s.hi = v
	}
	s.n++
}

func (s span) String() string { return fmt.Sprintf("%d..%d", s.lo, s.hi) }

// TestDurabilitySweep is TestDurability's longer sweep (make soak): each
// policy with 8, 64 and 256 buyers and 100 to 1,000 acknowledged moves
// unsynced at the kill, checked as TestDurability is, with the min-max of
// what each policy forgot, sold twice and recorded as lost.
func TestDurabilitySweep(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			var forgot, over, lost span
			for _, buyers := range []int{8, 64, 256} {
				for _, unsynced := range []int64{100, 250, 500, 750, 1000} {
					t.Run(fmt.Sprintf("%d buyers, %d unsynced", buyers, unsynced), func(t *testing.T) {
						r := durabilitySale(t, pol, buyers, unsynced)
						t.Logf("%v", r)
						checkDurability(t, pol, r)
						forgot.add(r.forgotten)
						over.add(r.oversold)
						lost.add(r.drift.Lost)
					})
				}
			}
			t.Logf("%s over %d rounds: forgotten %v, oversold %v, recorded lost %v", pol.name, forgot.n, forgot, over, lost)
		})
	}
}
