package inventorytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
)

// LedgerFaults configures [RunLedgerFaults]: a Manager that keeps a
// movement ledger, over a server the test owns, and how to crash that
// server and bring it back. Never point it at a server other tests share.
type LedgerFaults struct {
	// NewManager returns the manager under test, over the server that Kill
	// crashes. It is called once, and must keep a ledger (implement
	// [ledger.Reader] with an Entries that does not fail with
	// [ledger.ErrNotKept]). Release what it opens with t.Cleanup.
	NewManager func(t *testing.T) inventory.StockManager

	// Kill crashes the server, as SIGKILL does: the calls in flight fail,
	// and what the server had not made durable may be lost. Restart
	// brings it back on the same data and returns once it serves. Both
	// are called once, Kill mid-sale, Restart Down after it returned.
	Kill, Restart func()

	// Down is how long the server stays down. The default is 1s: longer
	// than a call's dial, so that calls fail rather than redial.
	Down time.Duration

	// Buyers is how many buyers the sale has; the default is 600. SKUs is
	// how many SKUs they buy (the default is 3), Stock each SKU's stock
	// (the default is Buyers/SKUs/2, so that the SKUs sell out after the
	// fault and some calls are refused).
	Buyers, SKUs int
	Stock        int64

	// Workers is how many buyers call at once; the default is 32.
	Workers int

	// CallTimeout bounds each call attempt; the default is 2s.
	CallTimeout time.Duration

	// Timeout bounds the whole run, the retries after the fault
	// included: a bound for a broken run only. The default is 2 minutes.
	Timeout time.Duration

	// Lossy says the restarted server may lack moves it acknowledged
	// before the crash: a Redis without an fsync'd append-only file,
	// restored from an older snapshot, or a replica promoted before it had
	// them. A move and its entry are then lost together: the suite checks
	// that no entry lacks its move and that the replay equals the stock,
	// and counts the acknowledged moves without an entry in
	// [LedgerFaultsResult].Lost instead of failing on them. It repeats no
	// call that took effect (its key may be lost with it), and takes
	// ErrNotFound or ErrHoldReleased from a Confirm or Cancel as the sign
	// of a lost hold (a server re-warmed from a system of record after a
	// restart, as tiered's fence does, drops its holds: ErrHoldReleased).
	Lossy bool

	// DropsHolds says a restart drops the holds made before it and writes
	// their units off (ledger.LostHeld), as tiered's fence does, while
	// the stock moves survive: a Confirm of such a hold may then say
	// ErrHoldReleased, or succeed without its entry (the order was
	// confirmed before the restart, its units written off instead of
	// sold), and a Cancel of it succeed without its entry (its units were
	// written off, not given back). The suite counts those
	// holds per SKU, and fails if they are more than the held units
	// written off.
	DropsHolds bool
}

// LedgerFaultsResult is what [RunLedgerFaults] saw.
type LedgerFaultsResult struct {
	Attempts int // call attempts
	Failed   int // attempts that failed with an unknown outcome (the fault)
	Moves    int // calls known to have taken effect
	Hidden   int // unkeyed calls whose outcome the fault hid, found in the ledger
	Entries  int // entries of the sale's SKUs, Init's included
	Lost     int // moves known to have taken effect without an entry (allowed with Lossy only)
	Retaken  int // holds more than one attempt held: one cut by the fault (given back or written off), then a retry
	Dropped  int // Confirms and Cancels of holds a restart dropped (LedgerFaults.DropsHolds)
	// WrittenOff is the units of the write-off entries ([ledger.Lost],
	// [ledger.LostHeld]): stock the manager found gone, no call's move.
	WrittenOff int64
}

func (c *LedgerFaults) defaults() {
	if c.Down <= 0 {
		c.Down = time.Second
	}
	if c.Buyers <= 0 {
		c.Buyers = 600
	}
	if c.SKUs <= 0 {
		c.SKUs = 3
	}
	if c.Stock <= 0 {
		c.Stock = max(int64(c.Buyers/c.SKUs/2), 1)
	}
	if c.Workers <= 0 {
		c.Workers = 32
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 2 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
}

// RunLedgerFaults runs a sale over a ledger-keeping manager while its
// server is killed and restarted, and then checks the ledger against the
// calls and the stock. It is the fault part of the ledger's proof, for a
// strategy's fault tests; [RunLedger] is the part without faults.
//
// Buyers, Workers at a time, buy one unit of one of the SKUs each, and
// some of them:
//
//   - keyed Reduces, retried with their key after any error that leaves
//     the outcome unknown (a backend error, a timeout) until the call
//     ends known: it took effect (success, or ErrDuplicate on a retry),
//     or it was refused (ErrInsufficientStock); one in ten that took
//     effect is repeated once more, which must say ErrDuplicate;
//   - keyed Returns of one in six keyed Reduces that took effect, retried
//     likewise;
//   - unkeyed Reduces, not retried after an unknown outcome (a retry
//     could sell twice): such a call may or may not have taken effect;
//   - on an [inventory.OrderManager], holds of one unit, Reserve then
//     Confirm or Cancel, each retried until known.
//
// Every call attempt has a reference of its own ([inventory.WithRef]).
// Kill strikes once a quarter of the buyers are done; the buyers retry
// across the outage. Once every call is known, RunLedgerFaults checks,
// SKU by SKU:
//
//   - no move without its entry: every call that took effect has exactly
//     one entry (a keyed call's retries are recorded once, a hold's by its
//     hold id), with its SKU, kind, units, key and the reference of one of
//     its attempts;
//   - no entry without its move: every entry but Init's and the
//     write-offs ([ledger.Kind.WrittenOff], stock the manager found gone
//     after the fault) is a call that took effect, or an unkeyed call
//     whose outcome the fault hid (which it shows took effect). A hold
//     is the exception: an attempt the fault cut after it held may have
//     its units given back (an Expire entry: its order abandoned, or
//     taken over by a retry) before a later attempt holds them again, so
//     a hold's Reserve and Expire entries must net to one hold when its
//     Reserve took effect and to none when it did not, or to more by
//     attempts whose held units a restart wrote off (per SKU, no more
//     than the held units written off);
//   - the replay equals the stock: [ledger.Replay] of the whole history
//     succeeds and ends at the stock read back (Get, and Held on an
//     OrderManager), its Sold is what the calls sold and its Held what
//     they hold less the held units written off.
//
// With Lossy set, a move that took effect may lack its entry, if the
// server lost both (see LedgerFaults.Lossy); the rest holds.
//
// It fails the test unless the fault failed some call (else Kill did not
// strike mid-sale), and returns what it saw. It uses SKUs, keys and hold
// ids of its own, unique to the run, and leaves them on the server.
func RunLedgerFaults(t *testing.T, cfg LedgerFaults) LedgerFaultsResult {
	t.Helper()
	if cfg.NewManager == nil || cfg.Kill == nil || cfg.Restart == nil {
		t.Fatal("inventorytest: LedgerFaults needs NewManager, Kill and Restart")
	}
	cfg.defaults()
	m, ok := cfg.NewManager(t).(ledgerManager)
	if !ok {
		t.Fatal("inventorytest: LedgerFaults.NewManager returned a manager that is not a ledger.Reader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	f := &faultSale{cfg: cfg, m: m, prefix: randomPrefix() + "lf-", calls: map[string]*faultCall{}}
	f.om, f.orders = m.(orderManager)
	for i := range cfg.SKUs {
		sku := f.prefix + fmt.Sprint("sku-", i)
		f.skus = append(f.skus, sku)
		if err := f.retry(ctx, func(ctx context.Context) error { return m.Init(ctx, sku, cfg.Stock) }); err != nil {
			t.Fatalf("Init(%q): %v", sku, err)
		}
		if _, err := m.Entries(ctx, sku, 0, 1); err != nil {
			t.Fatalf("inventorytest: %T keeps no ledger (Entries: %v)", m, err)
		}
	}
	f.run(ctx, t)
	if ctx.Err() != nil {
		t.Fatalf("the calls did not all end known within LedgerFaults.Timeout (%v): %d still unknown", cfg.Timeout, f.open.Load())
	}
	return f.check(ctx, t)
}

// faultCall is one call of the sale: its entry is found by id.
type faultCall struct {
	sku        string
	kind       ledger.Kind
	key, hold  string
	refs       []string // its attempts'
	took       bool     // it took effect, as far as its caller knows
	unknown    bool     // an unkeyed call whose outcome the fault hid
	dropped    bool     // a Confirm of a hold a restart dropped (DropsHolds)
	matched    bool     // an entry was found
	unexpected error
}

// entryID names a call by what its entry carries: a hold's entries by kind
// and hold id, a keyed call's by kind and key, an unkeyed call by its one
// attempt's reference.
func entryID(kind ledger.Kind, key, hold, ref string) string {
	switch {
	case hold != "":
		return fmt.Sprintf("%s/h/%s", kind, hold)
	case key != "":
		return fmt.Sprintf("%s/k/%s", kind, key)
	}
	return "r/" + ref
}

type faultSale struct {
	cfg    LedgerFaults
	m      ledgerManager
	om     orderManager
	orders bool
	prefix string
	skus   []string

	mu    sync.Mutex
	calls map[string]*faultCall

	attempts, failed, open atomic.Int64 // attempts; attempts with an unknown outcome; calls not yet known
	dups                   atomic.Int64 // repeats of a call that took effect, answered ErrDuplicate
}

// unknownOutcome reports whether err leaves a call's outcome unknown: it
// is none of the answers that say what the call did.
func unknownOutcome(err error) bool {
	for _, known := range []error{inventory.ErrDuplicate, inventory.ErrInsufficientStock, inventory.ErrContention,
		inventory.ErrNotFound, inventory.ErrInvalidArgument, inventory.ErrHoldReleased, inventory.ErrHoldConfirmed} {
		if errors.Is(err, known) {
			return false
		}
	}
	return err != nil
}

// retry calls op until it returns nil, an error that says what happened,
// or ctx ends: for the setup and the reads of the checks.
func (f *faultSale) retry(ctx context.Context, op func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
		err := op(cctx)
		cancel()
		if !unknownOutcome(err) && !errors.Is(err, inventory.ErrContention) || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, backoff(attempt))
	}
}

// backoff is the pause before the retry after attempt: from 20ms, doubled
// up to 320ms, so that the buyers' retries leave the restarting server
// (on the same cores, in a test) the CPU it needs.
func backoff(attempt int) time.Duration { return 20 * time.Millisecond << min(attempt, 4) }

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// do runs a keyed call (or a hold's call) until its outcome is known, each
// attempt with a reference of its own, and records it under its entry's
// id. It reports whether the call took effect.
func (f *faultSale) do(ctx context.Context, t *testing.T, c *faultCall, name string, op func(ctx context.Context, ref string) error) bool {
	id := entryID(c.kind, c.key, c.hold, "")
	f.mu.Lock()
	f.calls[id] = c
	f.mu.Unlock()
	f.open.Add(1)
	defer f.open.Add(-1)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		ref := fmt.Sprintf("%s#%d", name, attempt)
		cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
		err := op(cctx, ref)
		cancel()
		f.attempts.Add(1)
		f.mu.Lock()
		c.refs = append(c.refs, ref)
		f.mu.Unlock()
		switch {
		case err == nil, attempt > 0 && errors.Is(err, inventory.ErrDuplicate):
			f.mu.Lock()
			c.took = true
			f.mu.Unlock()
			return true
		case errors.Is(err, inventory.ErrInsufficientStock):
			return false
		case f.cfg.Lossy && c.hold != "" && c.kind != ledger.Reserve &&
			(errors.Is(err, inventory.ErrNotFound) || errors.Is(err, inventory.ErrHoldReleased)):
			return false // its Reserve was lost
		case f.cfg.DropsHolds && c.kind == ledger.Confirm && errors.Is(err, inventory.ErrHoldReleased):
			f.mu.Lock()
			c.dropped = true
			f.mu.Unlock()
			return false
		case errors.Is(err, inventory.ErrContention): // nothing changed: try again
			sleepCtx(ctx, backoff(attempt))
		case !unknownOutcome(err):
			t.Errorf("%s, attempt %d: %v", name, attempt, err)
			f.mu.Lock()
			c.unexpected = err
			f.mu.Unlock()
			return false
		default:
			f.failed.Add(1)
			sleepCtx(ctx, backoff(attempt))
		}
	}
	return false
}

// unkeyed runs an unkeyed Reduce: again after ErrContention, not after an
// unknown outcome.
func (f *faultSale) unkeyed(ctx context.Context, t *testing.T, sku, name string) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		ref := fmt.Sprintf("%s#%d", name, attempt)
		cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
		_, err := f.m.Reduce(cctx, sku, 1, inventory.WithRef(ref))
		cancel()
		f.attempts.Add(1)
		c := &faultCall{sku: sku, kind: ledger.Reduce, refs: []string{ref}, took: err == nil, unknown: unknownOutcome(err)}
		f.mu.Lock()
		f.calls[entryID(ledger.Reduce, "", "", ref)] = c
		f.mu.Unlock()
		switch {
		case err == nil, errors.Is(err, inventory.ErrInsufficientStock):
			return
		case errors.Is(err, inventory.ErrContention):
		case c.unknown:
			f.failed.Add(1)
			return
		default:
			t.Errorf("%s: %v", ref, err)
			return
		}
	}
}

// buyer runs buyer i's calls.
func (f *faultSale) buyer(ctx context.Context, t *testing.T, i int) {
	sku := f.skus[i%len(f.skus)]
	switch {
	case i%5 == 4 && f.orders:
		hold := f.prefix + fmt.Sprint("hold-", i)
		c := &faultCall{sku: sku, kind: ledger.Reserve, hold: hold}
		if !f.do(ctx, t, c, fmt.Sprint("reserve-", i), func(ctx context.Context, _ string) error {
			return f.om.Reserve(ctx, hold, []inventory.Line{{SKU: sku, Qty: 1}}, max(f.cfg.Timeout, time.Minute)+time.Minute)
		}) {
			return
		}
		end, kind := f.om.Confirm, ledger.Confirm
		if i%2 == 0 {
			end, kind = f.om.Cancel, ledger.Cancel
		}
		f.do(ctx, t, &faultCall{sku: sku, kind: kind, hold: hold}, fmt.Sprint(kind, "-", i), func(ctx context.Context, _ string) error {
			return end(ctx, hold)
		})
	case i%7 == 3:
		f.unkeyed(ctx, t, sku, fmt.Sprint("unkeyed-", i))
	default:
		key := f.prefix + fmt.Sprint("buy-", i)
		reduce := func(ctx context.Context, ref string) error {
			_, err := f.m.Reduce(ctx, sku, 1, inventory.WithKey(key), inventory.WithRef(ref))
			return err
		}
		c := &faultCall{sku: sku, kind: ledger.Reduce, key: key}
		if !f.do(ctx, t, c, fmt.Sprint("reduce-", i), reduce) {
			return
		}
		if i%10 == 0 && !f.cfg.Lossy { // a repeat of a call that took effect changes nothing
			if err := f.retry(ctx, func(ctx context.Context) error { return reduce(ctx, fmt.Sprint("repeat-", i)) }); errors.Is(err, inventory.ErrDuplicate) {
				f.dups.Add(1)
			} else {
				t.Errorf("repeat of reduce-%d, which took effect: %v, want ErrDuplicate", i, err)
			}
		}
		if i%6 == 0 {
			rkey := f.prefix + fmt.Sprint("refund-", i)
			f.do(ctx, t, &faultCall{sku: sku, kind: ledger.Return, key: rkey}, fmt.Sprint("refund-", i), func(ctx context.Context, ref string) error {
				_, err := f.m.Return(ctx, sku, 1, inventory.WithKey(rkey), inventory.WithRef(ref))
				return err
			})
		}
	}
}

// run runs the sale and the fault, which strikes once a quarter of the
// buyers are done; the second half of the buyers start after Kill returned.
func (f *faultSale) run(ctx context.Context, t *testing.T) {
	began := time.Now()
	next := make(chan int)
	var done atomic.Int64
	faulted := make(chan struct{})
	killed := make(chan struct{}) // closed once Kill returned
	var once sync.Once
	var struck atomic.Bool
	var wg sync.WaitGroup
	for range f.cfg.Workers {
		wg.Go(func() {
			for i := range next {
				f.buyer(ctx, t, i)
				if done.Add(1) == int64(f.cfg.Buyers/4) {
					once.Do(func() {
						struck.Store(true)
						go func() {
							defer close(faulted)
							t0 := time.Now()
							f.cfg.Kill()
							close(killed)
							t1 := time.Now()
							sleepCtx(ctx, f.cfg.Down)
							t2 := time.Now()
							f.cfg.Restart()
							t.Logf("the fault struck %v after the sale began: Kill took %v, Restart %v",
								t0.Sub(began).Round(time.Millisecond), t1.Sub(t0).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
						}()
					})
				}
			}
		})
	}
	for i := range f.cfg.Buyers {
		if i == f.cfg.Buyers/2 && f.cfg.Buyers/4 > 0 {
			// The second half starts once the server is down: on a fast
			// server the whole sale could end before Kill lands.
			select {
			case <-killed:
			case <-ctx.Done():
			}
		}
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("the sale ended %v after it began", time.Since(began).Round(time.Millisecond))
	if !struck.Load() {
		t.Fatal("inventorytest: the fault never struck (fewer than 4 buyers?)")
	}
	<-faulted
}

// check reads each SKU's history back and checks it against the calls
// and the stock.
func (f *faultSale) check(ctx context.Context, t *testing.T) LedgerFaultsResult {
	replayed := map[string]ledger.Stock{}
	retakes := holdAttempts{}
	heldOff := map[string]int64{} // held units written off, per SKU
	res := LedgerFaultsResult{Attempts: int(f.attempts.Load()), Failed: int(f.failed.Load())}
	for _, sku := range f.skus {
		es := f.history(ctx, t, sku)
		res.Entries += len(es)
		st, err := ledger.Replay(func(yield func(ledger.Entry, error) bool) {
			for _, e := range es {
				if !yield(e, nil) {
					return
				}
			}
		})
		if err != nil {
			t.Errorf("replay of %q: %v", sku, err)
		} else {
			replayed[sku] = st
			f.compareStock(ctx, t, sku, st)
		}
		for _, e := range es {
			switch {
			case e.Kind == ledger.Init:
			case e.Hold != "" && (e.Kind == ledger.Reserve || e.Kind == ledger.Expire):
				retakes.add(e)
			case e.Kind.WrittenOff():
				res.WrittenOff += e.Units
				if e.Kind == ledger.LostHeld {
					heldOff[sku] += e.Units
				}
			case f.matchEntry(t, e):
				res.Hidden++
			}
		}
	}
	cut := map[string]int64{} // per SKU, held units of cut attempts neither given back nor taken again
	for _, h := range retakes {
		sku, n, retaken := f.matchHold(t, h)
		cut[sku] += n
		if retaken {
			res.Retaken++
		}
	}
	for sku, n := range cut {
		if n > heldOff[sku] {
			t.Errorf("%s: %d held units of Reserve attempts neither given back nor written off (%d written off)", sku, n, heldOff[sku])
		}
		heldOff[sku] -= n // written off already as the attempts'
	}
	sold, held, dropped := f.tally(t, &res)
	for sku, n := range dropped {
		res.Dropped += int(n)
		if n > heldOff[sku] {
			t.Errorf("%s: %d holds found dropped (Confirm said ErrHoldReleased, or a Confirm or Cancel left no entry), more than the %d held units written off",
				sku, n, heldOff[sku])
		}
	}
	for sku, sum := range replayed {
		if sum.Sold != sold[sku] || sum.Held != held[sku]-heldOff[sku] {
			t.Errorf("%s: the ledger says %d sold and %d held; the calls that took effect, %d and %d (%d held written off)",
				sku, sum.Sold, sum.Held, sold[sku], held[sku], heldOff[sku])
		}
	}
	t.Logf("%d buyers, %d attempts, %d of them failed by the fault; %d moves known, %d of them without an entry; "+
		"%d unkeyed calls the fault hid had taken effect; %d repeats said ErrDuplicate; %d holds held by more than one attempt; %d holds found dropped; "+
		"%d entries on %d SKUs; %d units written off",
		f.cfg.Buyers, res.Attempts, res.Failed, res.Moves, res.Lost, res.Hidden, f.dups.Load(), res.Retaken, res.Dropped, res.Entries, len(f.skus), res.WrittenOff)
	if res.Failed == 0 {
		t.Errorf("the fault failed no call: Kill did not strike mid-sale")
	}
	return res
}

// history reads the whole history of sku, again until the server answers.
func (f *faultSale) history(ctx context.Context, t *testing.T, sku string) []ledger.Entry {
	var es []ledger.Entry
	err := f.retry(ctx, func(ctx context.Context) error {
		es = es[:0]
		for e, err := range ledger.History(ctx, f.m, sku, 0) {
			if err != nil {
				return err
			}
			es = append(es, e)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("history of %q: %v", sku, err)
	}
	return es
}

// tally counts the moves that took effect into res, reports those without
// an entry (unless Lossy), and returns the units the calls with an entry
// sold and hold, and the holds found dropped (DropsHolds), per SKU.
func (f *faultSale) tally(t *testing.T, res *LedgerFaultsResult) (sold, held, dropped map[string]int64) {
	sold, held, dropped = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for id, c := range f.calls {
		if c.dropped || f.cfg.DropsHolds && (c.kind == ledger.Cancel || c.kind == ledger.Confirm) && c.took && !c.matched {
			dropped[c.sku]++
			continue
		}
		if c.matched {
			switch c.kind {
			case ledger.Reduce:
				sold[c.sku]++
			case ledger.Return:
				sold[c.sku]--
			case ledger.Reserve:
				held[c.sku]++
			case ledger.Confirm:
				sold[c.sku]++
				held[c.sku]--
			case ledger.Cancel:
				held[c.sku]--
			}
		}
		if !c.took {
			continue
		}
		res.Moves++
		if !c.matched {
			res.Lost++
			if !f.cfg.Lossy && res.Lost <= 10 {
				t.Errorf("a move without its entry: %s (%s %s, attempts %v)", id, c.sku, c.kind, c.refs)
			}
		}
	}
	if !f.cfg.Lossy && res.Lost > 10 {
		t.Errorf("%d moves without their entry in all", res.Lost)
	}
	return sold, held, dropped
}

// matchEntry matches e with its call; it reports whether that call is an
// unkeyed one whose outcome the fault hid.
func (f *faultSale) matchEntry(t *testing.T, e ledger.Entry) bool {
	id := entryID(e.Kind, e.Key, e.Hold, e.Ref)
	c, ok := f.calls[id]
	switch {
	case !ok:
		t.Errorf("an entry without its move: no call made %+v", e)
		return false
	case c.matched:
		t.Errorf("a call recorded twice: %s, again at %+v", id, e)
		return false
	case !c.took && !c.unknown:
		t.Errorf("an entry without its move: %s did not take effect (attempts %v, %v), yet %+v", id, c.refs, c.unexpected, e)
	}
	c.matched = true
	if e.SKU != c.sku || e.Units != 1 || e.Key != c.key || e.Hold != c.hold {
		t.Errorf("entry of %s: %+v, want SKU %q, 1 unit, key %q, hold %q", id, e, c.sku, c.key, c.hold)
	}
	if c.hold == "" && !slices.Contains(c.refs, e.Ref) {
		t.Errorf("entry of %s: reference %q is none of its attempts' %v", id, e.Ref, c.refs)
	}
	return c.unknown
}

// holdAttempts gathers, per hold id, the Reserve and Expire entries of
// a hold's attempts.
type holdAttempts map[string]*holdEntries

type holdEntries struct {
	reserves, expires []ledger.Entry
}

func (a holdAttempts) add(e ledger.Entry) {
	h := a[e.Hold]
	if h == nil {
		h = &holdEntries{}
		a[e.Hold] = h
	}
	if e.Kind == ledger.Reserve {
		h.reserves = append(h.reserves, e)
	} else {
		h.expires = append(h.expires, e)
	}
}

// matchHold matches a hold's Reserve and Expire entries with its Reserve
// call. An attempt cut by the fault after it held may have its units given
// back (its order abandoned, or taken over by a retry: an Expire entry)
// before a later attempt holds them again, or written off (a restart that
// dropped Redis's holds: ledger.LostHeld, which names no hold). So a
// hold's Reserve entries less its Expire entries must be one when the
// call took effect, none when it did not, plus the cut attempts whose
// units were written off, which matchHold returns (per SKU, the caller
// checks them against the write-offs). It also reports whether more than
// one attempt held.
func (f *faultSale) matchHold(t *testing.T, h *holdEntries) (sku string, cut int64, retaken bool) {
	if len(h.reserves) == 0 {
		t.Errorf("an entry without its move: no Reserve recorded before %+v", h.expires[0])
		return "", 0, false
	}
	first := h.reserves[0]
	id := entryID(ledger.Reserve, "", first.Hold, "")
	c, ok := f.calls[id]
	if !ok {
		t.Errorf("an entry without its move: no call made %+v", first)
		return "", 0, false
	}
	for _, e := range slices.Concat(h.reserves, h.expires) {
		if e.SKU != c.sku || e.Units != 1 {
			t.Errorf("entry of %s: %+v, want SKU %q, 1 unit", id, e, c.sku)
		}
	}
	took := 0
	if c.took {
		took = 1
	}
	net := len(h.reserves) - len(h.expires)
	switch {
	case net >= took:
		c.matched = c.took
		cut = int64(net - took)
	case f.cfg.Lossy && c.took && net == 0:
	default:
		t.Errorf("%s (took effect: %v, attempts %v, %v): %d Reserve and %d Expire entries, want them to net to %d or more",
			id, c.took, c.refs, c.unexpected, len(h.reserves), len(h.expires), took)
	}
	return c.sku, cut, len(h.reserves) > 1
}

// compareStock compares the replay st of sku with the stock read back.
func (f *faultSale) compareStock(ctx context.Context, t *testing.T, sku string, st ledger.Stock) {
	var got int64
	if err := f.retry(ctx, func(ctx context.Context) (err error) { got, err = f.m.Get(ctx, sku); return err }); err != nil {
		t.Errorf("Get(%q): %v", sku, err)
	} else if got != st.Available {
		t.Errorf("%s: Get says %d available, the ledger's replay %d", sku, got, st.Available)
	}
	if !f.orders {
		return
	}
	if err := f.retry(ctx, func(ctx context.Context) (err error) { got, err = f.om.Held(ctx, sku); return err }); err != nil {
		t.Errorf("Held(%q): %v", sku, err)
	} else if got != st.Held {
		t.Errorf("%s: Held says %d, the ledger's replay %d", sku, got, st.Held)
	}
}
