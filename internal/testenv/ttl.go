package testenv

import (
	"testing"
	"time"
)

// TTLRounds runs a scenario that needs a hold, lock or key it starts with
// ttl to be still live when some check runs, and that a loaded machine may
// reach too late. round returns false when Live showed that its TTL might
// have run out before such a check (which it then did not make); TTLRounds
// then logs why and runs round again with 4 times the TTL, up to max. Each
// round must work on fresh SKUs and ids. When a round with max is late too,
// t is skipped: that is the machine's load, not a finding.
func TTLRounds(t testing.TB, ttl, max time.Duration, round func(ttl time.Duration) bool) {
	t.Helper()
	for ; !round(ttl); ttl *= 4 {
		if ttl*4 > max {
			t.Skipf("not checked: with a TTL of %v too, the machine was too slow to make the checks that need it live", ttl)
		}
		t.Logf("again with a TTL of %v", ttl*4)
	}
}

// Live reports whether less than ttl has passed since start by the
// client's clock: a TTL of ttl that a call made after start began is then
// still live on the backend. Called just after a check that needs it live,
// it tells whether that check ran in time; when not, it logs so (check
// names it).
func Live(t testing.TB, start time.Time, ttl time.Duration, check string) bool {
	t.Helper()
	if took := time.Since(start); took >= ttl {
		t.Logf("%s came %v after the call that started its TTL of %v: not checked", check, took.Round(time.Millisecond), ttl)
		return false
	}
	return true
}
