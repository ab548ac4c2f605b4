package tiered

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBreakerStates walks the breaker through its states with a clock of
// its own: no Redis, no SQL, no sleeping.
func TestBreakerStates(t *testing.T) {
	starts := 0
	m := &Manager{}
	b := &m.br
	b.init(3, time.Second, func() { starts++ })
	t0 := time.Unix(1000, 0)

	// Failures that are not in a row do not open it.
	b.record(false, t0)
	b.record(false, t0)
	b.record(true, t0)
	b.record(false, t0.Add(time.Millisecond))
	require.False(t, b.openAt(t0), "a reached call ended the run of failures")

	// Three in a row open it, from the first of them, for openFor.
	b.record(false, t0.Add(2*time.Millisecond))
	b.record(false, t0.Add(3*time.Millisecond))
	assert.Equal(t, brOpen, b.state)
	assert.Equal(t, t0.Add(time.Millisecond), b.outage, "the outage began at the run's first failure")
	assert.True(t, b.openAt(t0.Add(500*time.Millisecond)), "open during the open period")
	assert.Zero(t, starts, "no recovery during the open period")
	done := b.done
	require.NotNil(t, done)

	// The first call after the open period starts one recovery.
	later := t0.Add(3*time.Millisecond + time.Second)
	assert.True(t, b.openAt(later))
	assert.Equal(t, brRecovering, b.state)
	assert.True(t, b.openAt(later.Add(time.Hour)), "calls skip Redis while it recovers")
	assert.Equal(t, 1, starts, "one recovery")

	// A failed recovery reopens it for another open period.
	b.reopen(errors.New("boom"), later)
	assert.True(t, b.openAt(later.Add(time.Second/2)))
	assert.Equal(t, 1, starts)
	assert.True(t, b.openAt(later.Add(time.Second)))
	assert.Equal(t, 2, starts, "the next open period over: another recovery")

	// A recovery that succeeds closes it, forgets what it reconciled and
	// keeps its findings.
	b.touch("a")
	b.touch("b")
	b.recovered(Recovery{Outage: b.outage, Drifts: []Drift{{SKU: "a"}}}, 0)
	assert.False(t, b.openAt(later))
	assert.Equal(t, map[string]bool{"b": true}, b.touched, "b was moved by the fallback and not reconciled")
	select {
	case <-done:
	default:
		t.Fatal("closing did not close done")
	}
	recs, failed, lastErr := m.Recoveries()
	assert.Len(t, recs, 1)
	assert.Equal(t, int64(1), failed)
	assert.NoError(t, lastErr)
}

// TestBreakerTrip checks that a restart the watch saw opens the circuit
// with its open period over, and that the recovery is told.
func TestBreakerTrip(t *testing.T) {
	starts := 0
	var b breaker
	b.init(3, time.Hour, func() { starts++ })
	now := time.Unix(2000, 0)
	b.trip(now)
	assert.True(t, b.restart)
	assert.Equal(t, now, b.outage)
	assert.True(t, b.openAt(now), "a trip does not wait for the open period")
	assert.Equal(t, 1, starts)

	// A trip while the circuit is already open only marks the restart.
	b.restart = false
	b.trip(now.Add(time.Minute))
	assert.True(t, b.restart)
	assert.Equal(t, brRecovering, b.state)
	assert.Equal(t, now, b.outage)

	// A recovery keeps the restart owed when it failed, or when another
	// restart came after it read the count; else it takes it in.
	seen, n := b.restartSeen()
	require.True(t, seen)
	b.reopen(errors.New("boom"), now)
	seen, _ = b.restartSeen()
	assert.True(t, seen, "a failed recovery took no restart in")
	b.trip(now.Add(2 * time.Minute))
	b.recovered(Recovery{Restarted: true}, n)
	seen, _ = b.restartSeen()
	assert.True(t, seen, "a restart seen during the recovery stays owed")
	_, n = b.restartSeen()
	b.recovered(Recovery{Restarted: true}, n)
	seen, _ = b.restartSeen()
	assert.False(t, seen)
}

// TestBreakerHistory checks that the recoveries kept are bounded.
func TestBreakerHistory(t *testing.T) {
	var b breaker
	b.init(1, time.Second, func() {})
	for i := range maxRecoveries + 3 {
		b.recovered(Recovery{Outage: time.Unix(int64(i), 0)}, 0)
	}
	require.Len(t, b.history, maxRecoveries)
	assert.Equal(t, time.Unix(3, 0), b.history[0].Outage, "the oldest were dropped")
}
