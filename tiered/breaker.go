package tiered

import (
	"slices"
	"sync"
	"time"
)

// The circuit breaker in front of Redis, a plain state machine that knows
// nothing of Redis or SQL: the Manager tells it each Redis call's outcome
// (record), asks it before each call whether to skip Redis (open), and
// hands it the recovery's outcome (recovered, reopen). Its states:
//
//	closed     --failures in a row, or trip-->  open
//	open       --open period over, a call-->    recovering (start runs)
//	recovering --recovered-->                   closed
//	recovering --reopen-->                      open
//
// Its only way out is start, the function that begins a recovery, given
// when the Manager is built.

// Defaults of the circuit breaker ([WithBreaker]).
const (
	DefaultBreakerFailures = 3
	DefaultBreakerOpen     = time.Second
)

// WithBreaker sets the circuit breaker in front of Redis.
//
// Thresholds: after failures consecutive calls failed to reach Redis (a
// network error, a timeout or the call's deadline passing, a closed client;
// not a Redis error reply nor a cancelled ctx), the circuit opens for open:
// calls then go to SQL alone (see [Manager.Reduce]). failures >= 1,
// open > 0; the defaults are [DefaultBreakerFailures] (3) and
// [DefaultBreakerOpen] (1 s).
//
// Recovery: once open has passed, the next call starts one recovery in the
// background and, like every call until the recovery ends, is still served
// by SQL. The recovery asks Redis (INFO server of each master) whether it
// restarted since the first of the failures (its uptime is shorter: it may
// have come back empty, or from an older AOF or RDB, or be a promoted
// replica that restarted), then runs [Manager.Reconcile] on the SKUs the
// fallback moved, or, after a restart, on every SKU of the SKU table: it
// records as lost the allotment a Redis that came back empty or at an older
// generation no longer holds, takes out of the allotment of a Redis that
// came back with an older state the units SQL's synced sales say it
// already sold (its excess), applies the grants it missed, and sets its
// view of the pool to SQL's. Each step is bounded by the refill timeout
// ([WithRefillTimeout]; the sync that precedes each SKU's comparison gets
// three such rounds). Only then does the circuit close and Redis take
// traffic again; if a step fails, the circuit opens for another open
// period, and the next recovery starts over. SKUs the fallback moves while a
// recovery runs are reconciled by it too (in up to three passes); SQL's
// moves after a SKU's pass only leave Redis's view of the pool high, which
// its next grant corrects. Units are never created: a bounded undersell
// (the allotment recorded lost) is the price. [Manager.Recoveries] lists
// what the recoveries found.
//
// A restart is seen by the calls that fail meanwhile, by Redis's uptime,
// and by the restart watch: every new connection asks Redis its run_id,
// and a new one opens the circuit at once, with no call sent to the
// restarted Redis before the recovery; a Manager's first command also
// reads the run_id stamp (PREFIX:run), so one started after the restart
// fences it too. A restart stays owed until a recovery that took it in
// succeeds. After a restart the recovery drops
// Redis's state of every SKU and re-warms it from SQL, the allotment and
// holds it had recorded lost (a bounded undersell): a Redis restored from
// an older state (an AOF copied mid-sale, a lagging replica) has forgotten
// moves it acknowledged, which no count in SQL or Redis can show.
// [WithTrustRestarts] reconciles instead.
func WithBreaker(failures int, open time.Duration) Option {
	return func(c *config) { c.brFailures, c.brOpen = failures, open }
}

// Breaker states.
const (
	brClosed     = iota // calls go to Redis
	brOpen              // calls go to SQL until the open period passes
	brRecovering        // calls go to SQL while a recovery runs
)

// maxRecoveries bounds the recoveries [Manager.Recoveries] keeps.
const maxRecoveries = 16

// breaker counts consecutive failures to reach Redis, and remembers what
// the recovery needs (the SKUs the fallback moved, a restart seen) and
// what the recoveries found.
type breaker struct {
	failures int           // failures in a row that open the circuit
	openFor  time.Duration // how long it stays open before a recovery
	start    func()        // starts a recovery; runs with mu held

	mu       sync.Mutex
	state    int
	fails    int
	first    time.Time // the first failure of the current run of failures
	outage   time.Time // the first failure of the run that opened the circuit
	until    time.Time // open until then
	touched  map[string]bool
	done     chan struct{} // closed when the circuit closes (tests)
	history  []Recovery
	lastErr  error
	failed   int64
	restart  bool   // the restart watch saw Redis restart (restart.go)
	restarts uint64 // restarts seen so far: a recovery clears restart only if none came during it
}

// init sets the breaker's thresholds and its recovery.
func (b *breaker) init(failures int, openFor time.Duration, start func()) {
	b.failures, b.openFor, b.start = failures, openFor, start
}

// Recovery is what one recovery of the circuit ([WithBreaker]) found.
type Recovery struct {
	// Outage is the first failure of the run that opened the circuit;
	// Closed is when the recovery closed it.
	Outage, Closed time.Time
	// Restarted says Redis restarted since Outage (or could not tell):
	// every SKU was reconciled, not only those the fallback moved.
	Restarted bool
	// Drifts are Reconcile's findings, one per SKU reconciled.
	Drifts []Drift
}

// open reports whether calls must skip Redis now. The first call after the
// open period starts the recovery.
func (b *breaker) open() bool { return b.openAt(time.Now()) }

func (b *breaker) openAt(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case brClosed:
		return false
	case brOpen:
		if now.Before(b.until) {
			return true
		}
		b.state = brRecovering
		b.start()
	}
	return true
}

// record records the outcome of a Redis call: reached says Redis answered
// it (or the caller cancelled it), so the run of failures ends.
func (b *breaker) record(reached bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if reached {
		b.fails = 0
		return
	}
	if b.fails == 0 {
		b.first = now
	}
	b.fails++
	if b.fails >= b.failures && b.state == brClosed {
		b.openLocked(b.first, now.Add(b.openFor))
	}
}

// trip opens the circuit at once, its open period already over, for a
// restart of Redis (the restart watch): the recovery that follows knows
// Redis restarted.
func (b *breaker) trip(now time.Time) (done <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.restart = true
	b.restarts++
	if b.state == brClosed {
		b.openLocked(now, now)
	}
	return b.done
}

// restartSeen reports whether a restart was seen and not yet taken in by
// a recovery that succeeded, and the count of restarts seen, which the
// recovery hands back to recovered.
func (b *breaker) restartSeen() (bool, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.restart, b.restarts
}

// pending returns the channel that the circuit closing next closes, nil
// if it is closed.
func (b *breaker) pending() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// settled reports whether the circuit is closed with no restart pending,
// else the channel that its closing next closes.
func (b *breaker) settled() (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == brClosed && !b.restart, b.done
}

// touchedSKUs returns the SKUs the fallback moved that are not in done.
func (b *breaker) touchedSKUs(done map[string]bool) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var skus []string
	for sku := range b.touched {
		if !done[sku] {
			skus = append(skus, sku)
		}
	}
	return skus
}

// openLocked opens the circuit for an outage that began at outage, until
// until; b.mu is held.
func (b *breaker) openLocked(outage, until time.Time) {
	b.state, b.until, b.outage = brOpen, until, outage
	if b.done == nil {
		b.done = make(chan struct{})
	}
}

// touch records that the fallback moved sku.
func (b *breaker) touch(sku string) {
	b.mu.Lock()
	if b.touched == nil {
		b.touched = map[string]bool{}
	}
	b.touched[sku] = true
	b.mu.Unlock()
}

// recovered closes the circuit after the recovery rec: the SKUs it
// reconciled are no longer owed a recovery, nor is a restart, unless one
// was seen after the recovery read restarts (the count of restartSeen).
func (b *breaker) recovered(rec Recovery, restarts uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state, b.fails, b.lastErr = brClosed, 0, nil
	if b.restarts == restarts {
		b.restart = false
	}
	for _, d := range rec.Drifts {
		delete(b.touched, d.SKU)
	}
	if len(b.history) == maxRecoveries {
		b.history = b.history[1:]
	}
	b.history = append(b.history, rec)
	if b.done != nil {
		close(b.done)
		b.done = nil
	}
}

// reopen opens the circuit for another open period after a recovery that
// failed with err.
func (b *breaker) reopen(err error, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state, b.until, b.lastErr = brOpen, now.Add(b.openFor), err
	b.failed++
}

// Recoveries returns what the last recoveries of the circuit found, oldest
// first (at most 16 are kept), how many recoveries failed (each reopened
// the circuit), and the last failure's error, if the circuit is open
// since.
func (m *Manager) Recoveries() (recs []Recovery, failed int64, lastErr error) {
	b := &m.br
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.history), b.failed, b.lastErr
}
