package refusals

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTable(t *testing.T) {
	r := New(time.Hour)
	_, ok := r.Check("a", 1)
	require.False(t, ok, "nothing recorded")

	r.Refused("a", 3, time.Now(), r.Epoch("a"))
	n, ok := r.Check("a", 4)
	require.True(t, ok)
	require.EqualValues(t, 3, n, "the stock seen")
	_, ok = r.Check("a", 3)
	require.False(t, ok, "a Reduce that fits the stock seen goes to the backend")
	_, ok = r.Check("b", 4)
	require.False(t, ok, "another SKU")

	r.Added("a")
	_, ok = r.Check("a", 4)
	require.False(t, ok, "a call that may add units drops the refusal")

	e := r.Epoch("a")
	r.Added("a") // a Return ran while the Reduce was in flight
	r.Refused("a", 0, time.Now(), e)
	_, ok = r.Check("a", 1)
	require.False(t, ok, "a refusal that raced a Return is not recorded")

	old := New(time.Millisecond)
	old.Refused("a", 0, time.Now().Add(-time.Second), old.Epoch("a"))
	_, ok = old.Check("a", 1)
	require.False(t, ok, "stale past the TTL")
}

// A later SKU of a slot takes the entry over; the earlier one's calls go
// to the backend again (never refused on another SKU's stock).
func TestSlotTakenOver(t *testing.T) {
	r := New(time.Hour)
	var a, b string
	for i := 0; b == ""; i++ {
		s := string(rune('a'+i%26)) + time.Duration(i).String()
		if a == "" {
			a = s
		} else if s != a && r.slot(s) == r.slot(a) {
			b = s
		}
	}
	r.Refused(a, 0, time.Now(), r.Epoch(a))
	r.Refused(b, 5, time.Now(), r.Epoch(b))
	_, ok := r.Check(a, 1)
	require.False(t, ok)
	n, ok := r.Check(b, 6)
	require.True(t, ok)
	require.EqualValues(t, 5, n)
}
