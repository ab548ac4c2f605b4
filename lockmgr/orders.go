package lockmgr

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/ledger"
)

// AbandonGrace is how long after it was recorded (on the store's clock)
// an incomplete order (a Reserve or a keyed lines call that crashed
// midway, or is still running) is given up, unless configured otherwise
// ([WithAbandonGrace]), whatever the hold's TTL: Sweep, or a retry of the
// call with the same hold id or key, then gives its held lines back and
// frees the id, which the retry then uses. A Reserve (or ReduceLines)
// that takes longer than half of it to hold its lines gives up with
// inventory.ErrContention, and its completion, or its give-back of what it
// held, ends within three quarters of it (what a give-back leaves, the
// abandonment gives back), so that none of its writes meets a retry's.
const AbandonGrace = time.Minute

// WithAbandonGrace sets how long after it was recorded an incomplete
// order is given up (see [AbandonGrace], the default). Every Manager on
// one store should use the same. New has no error to return, so it treats
// values below 2ms as 2ms.
func WithAbandonGrace(d time.Duration) Option {
	return func(c *config) { c.abandon = max(d, 2*time.Millisecond) }
}

// SweepLimit bounds the orders one Sweep looks at, so that one call's work
// stays bounded; a Sweep that released that many returns, and the next
// call goes on.
const SweepLimit = 10_000

const (
	linesTTL   = time.Minute // the hold of a ReduceLines in progress
	lazyMax    = 8           // expired lines released per SKU per call
	sweepBatch = 100
)

// Order ids in the HoldStore: a kind letter, a colon, then the caller's
// id, key or a random id.
const (
	kindHold      = "h:" // Reserve(id)
	kindReduceKey = "r:" // ReduceLines with WithKey(k)
	kindReduce    = "x:" // ReduceLines without a key: a random id
	kindReturnKey = "R:" // ReturnLines with WithKey(k)
)

var _ inventory.OrderManager = (*Manager)(nil)

// holds returns the Manager's Store as a HoldStore.
func (m *Manager) holds() (HoldStore, error) {
	hs, ok := m.store.(HoldStore)
	if !ok {
		return nil, fmt.Errorf("%w: the store %T keeps no holds (it is not a lockmgr.HoldStore)", errors.ErrUnsupported, m.store)
	}
	return hs, nil
}

// MoveLines implements [front.Backend].
func (b *backend) MoveLines(ctx context.Context, lines []inventory.Line, dir driver.Direction, key string) error {
	if dir == driver.DirReturn {
		return (*Manager)(b).returnLines(ctx, lines, key)
	}
	return (*Manager)(b).reduceLines(ctx, lines, key)
}

// reduceLines is ReduceLines: it holds every line under an order of its
// own, then confirms it.
func (m *Manager) reduceLines(ctx context.Context, lines []inventory.Line, key string) error {
	hs, err := m.holds()
	if err != nil {
		return err
	}
	id := kindReduce + randomID()
	if key != "" {
		id = kindReduceKey + key
	}
	return m.reduceOrder(ctx, hs, id, lines, key, true)
}

// reduceOrder is reduceLines under order id. When the id's record exists
// (a keyed call again) it answers as repeat does; with takeOver, it gives
// up an incomplete record that is abandoned, and runs once more.
func (m *Manager) reduceOrder(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, key string, takeOver bool) error {
	err := m.reserve(ctx, hs, id, lines, linesTTL)
	if errors.Is(err, inventory.ErrDuplicate) {
		var again func(context.Context) error
		if takeOver {
			again = func(ctx context.Context) error { return m.reduceOrder(ctx, hs, id, lines, key, false) }
		}
		return m.repeat(ctx, hs, id, key, again)
	}
	if err != nil {
		return err
	}
	return m.sell(ctx, hs, id, key != "")
}

// sell confirms the order id of a ReduceLines that holds every line. When
// the store could not confirm it, a keyed call leaves the lines held for
// its retry with the key, which sells them (see repeat), and says so; a
// keyless one whose confirmation the store refused (ErrContention: it
// wrote nothing) gives the lines back before it says why.
func (m *Manager) sell(ctx context.Context, hs HoldStore, id string, keyed bool) error {
	decided, err := m.confirm(ctx, hs, id)
	switch {
	case errors.Is(err, inventory.ErrHoldReleased):
		return fmt.Errorf("%w: the lines' hold ran out (%v) before they were sold", inventory.ErrContention, linesTTL)
	case err == nil || decided:
		return err
	case keyed:
		return unsettled("the lines are held under the call's key; a retry with the key sells them", err)
	case !errors.Is(err, inventory.ErrContention):
		return unsettled(fmt.Sprintf("the lines are sold, or held until %v after the call began", linesTTL), err)
	}
	if cerr := m.giveBack(ctx, func(ctx context.Context) error { return m.cancel(ctx, hs, id) }); cerr != nil {
		return unsettled(fmt.Sprintf("giving the held lines back failed (they come back %v after the call began)", linesTTL), errors.Join(err, cerr))
	}
	return err
}

// repeat answers a keyed lines call whose order id exists: a repeat of a
// call that took effect is ErrDuplicate; one that held every line and then
// failed is finished now. A record still incomplete is a call in progress,
// or one cut midway: once it is abandoned (the abandon grace after it was
// recorded) and again is not nil, repeat gives it up as Sweep does
// (giveUp) and runs again, the call once more.
func (m *Manager) repeat(ctx context.Context, hs HoldStore, id, key string, again func(context.Context) error) error {
	o, gone, err := m.orderOrGiveUp(ctx, hs, id, again != nil)
	if gone {
		return again(ctx)
	}
	switch {
	case errors.Is(err, inventory.ErrNotFound): // it went in between
		return fmt.Errorf("%w: a call with key %q just ended", inventory.ErrContention, key)
	case err != nil:
		return err
	case o.State == OrderConfirmed:
		// The first call may have failed while settling its lines: settle
		// them, so that Held no longer counts units now reported sold.
		if err := m.finish(ctx, hs, o); err != nil {
			return err
		}
		return fmt.Errorf("%w: key %q", inventory.ErrDuplicate, key)
	case o.State == OrderHeld && o.Complete && strings.HasPrefix(id, kindReduceKey):
		return m.sell(ctx, hs, id, true)
	case o.State == OrderHeld && !o.Complete:
		return fmt.Errorf("%w: a call with key %q is in progress (or was cut midway: its record is given up %v after it was recorded)",
			inventory.ErrContention, key, m.abandon)
	case o.State == OrderHeld:
		return fmt.Errorf("%w: a call with key %q is in progress", inventory.ErrContention, key)
	}
	return fmt.Errorf("%w: an earlier call with key %q failed and its key is kept until its record expires", inventory.ErrContention, key)
}

// returnLines is ReturnLines: it checks every line,
// then writes them one by one, each under its SKU's lock and with a ledger
// entry of its own (see returnAll). With a key, the call's order
// record is complete once the lines are checked: a repeat that finds it
// complete but not confirmed (the first call failed midway, or is still
// writing) writes what is missing and reports ErrDuplicate.
func (m *Manager) returnLines(ctx context.Context, lines []inventory.Line, key string) error {
	hs, err := m.holds()
	if err != nil {
		return err
	}
	// Each line's CompareAndSet records a return with the call's key
	// (returnAttempt sets the units), not the line key of its own.
	ctx = m.note(ctx, Note{Kind: ledger.Return, Key: key, Ref: driver.Ref(ctx)})
	if key == "" {
		_, err := m.returnAll(ctx, hs, lines, "L"+randomID(), nil)
		return err
	}
	return m.returnKeyed(ctx, hs, kindReturnKey+key, lines, key, true)
}

// returnKeyed is a keyed ReturnLines under record id. When the record
// exists it answers as returnRepeat does; with takeOver, it gives up an
// incomplete record that is abandoned, and runs once more.
func (m *Manager) returnKeyed(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, key string, takeOver bool) error {
	switch _, err := m.createOrder(ctx, hs, id, lines, linesTTL); {
	case errors.Is(err, inventory.ErrDuplicate):
		var again func(context.Context) error
		if takeOver {
			again = func(ctx context.Context) error { return m.returnKeyed(ctx, hs, id, lines, key, false) }
		}
		return m.returnRepeat(ctx, hs, id, key, again)
	case err != nil:
		return err
	}
	return m.returnRecorded(ctx, hs, id, lines, key)
}

// returnRepeat is a keyed ReturnLines whose record id exists already: a
// record complete but not confirmed has its missing lines written (and
// reports ErrDuplicate); any other is answered as a repeat (which, with
// again, takes an abandoned incomplete record over: see repeat). An
// incomplete record wrote nothing (its call writes only once StepComplete
// made it complete, which decides against StepExpire), so giving it up
// needs no bound on how long its call takes.
func (m *Manager) returnRepeat(ctx context.Context, hs HoldStore, id, key string, again func(context.Context) error) error {
	rec, err := hs.Order(ctx, id)
	if err != nil || !rec.Complete || rec.State == OrderConfirmed {
		return m.repeat(ctx, hs, id, key, again)
	}
	// Checked, and perhaps written in part: write the rest. The
	// lines' ledger entries say which are written.
	if _, err := m.returnAll(ctx, hs, rec.Lines, lineKey(key), nil); err != nil {
		return err
	}
	_, _, _ = hs.UpdateOrder(ctx, id, StepConfirm)
	_, _, _ = hs.UpdateOrder(ctx, id, StepFinish)
	return fmt.Errorf("%w: key %q (this call finished what an earlier one began)", inventory.ErrDuplicate, key)
}

// returnRecorded returns lines of a keyed ReturnLines whose record id it
// has just created: it completes the record once the lines are checked,
// writes them, then confirms and finishes the record; when nothing was
// written it gives the record up.
func (m *Manager) returnRecorded(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, key string) error {
	complete := func(ctx context.Context) error {
		_, changed, err := m.step(ctx, hs, id, StepComplete, m.maxAttempts)
		if err == nil && !changed {
			err = fmt.Errorf("%w: the call's record was given up", inventory.ErrContention)
		}
		return err
	}
	if wrote, err := m.returnAll(ctx, hs, lines, lineKey(key), complete); err != nil {
		if !wrote {
			if aerr := m.giveBack(ctx, func(ctx context.Context) error { return m.abort(ctx, hs, id) }); aerr != nil {
				return unsettled(fmt.Sprintf("nothing was returned, but key %q stays taken until its record is given up", key), errors.Join(err, aerr))
			}
		}
		return err
	}
	for _, st := range []OrderStep{StepConfirm, StepFinish} {
		if _, _, err := m.step(ctx, hs, id, st, math.MaxInt); err != nil {
			return unsettled(fmt.Sprintf("the lines were returned; recording key %q failed (a retry with the key records it)", key), err)
		}
	}
	return nil
}

// lineKey is the ledger key of the lines of a ReturnLines with key k: a
// hash, so that it stays within MaxSKULen.
func lineKey(k string) string {
	h := sha256.Sum256([]byte(k))
	return "L" + hex.EncodeToString(h[:16])
}

// returnAll returns lines. When checked is not nil it first checks every
// line (reading each SKU) and calls checked (an error of checked ends the
// call); then it writes each line under its SKU's lock, one lock at a time
// (holding them all would make every caller of one SKU wait for the queues
// of the others), with a compare-and-set that records (sku, return, key) in
// the ledger, so that a line is never written twice. Once a line is
// written the call goes on to the end, even past a done ctx (for a bounded
// time): all lines or none, unless another return in between pushes a
// checked line past MaxStock. wrote says whether some line may be written;
// an error with wrote true wraps no ErrContention (a blind retry would
// return twice): retry with the same idempotency key, which finishes the
// call.
func (m *Manager) returnAll(ctx context.Context, hs HoldStore, lines []inventory.Line, key string, checked func(context.Context) error) (wrote bool, err error) {
	if err := checkReturns(ctx, hs, lines); err != nil {
		return false, err
	}
	if checked != nil {
		if err := checked(ctx); err != nil {
			return false, err
		}
	}
	for i, l := range lines {
		attempts := m.maxAttempts
		if i > 0 || checked != nil {
			// A checked return is never refused (and a complete record
			// cannot be aborted): only ctx ends it.
			attempts = math.MaxInt
		}
		err := m.returnLine(ctx, hs, l, key, attempts, true)
		if err == nil {
			continue
		}
		if i == 0 && checked == nil && !errors.Is(err, errUnknown) {
			return false, fmt.Errorf("%q: %w", l.SKU, err)
		}
		return true, m.returnRest(ctx, hs, lines[i:], key)
	}
	return true, nil
}

// checkReturns reads the SKU of every line and checks that returning it
// keeps the stock within MaxStock.
func checkReturns(ctx context.Context, hs HoldStore, lines []inventory.Line) error {
	for _, l := range lines {
		cur, _, _, _, err := hs.ReadHolds(ctx, l.SKU, 1)
		if err != nil {
			return fmt.Errorf("%q: %w", l.SKU, err)
		}
		if err := driver.CheckReturn(cur, l.Qty); err != nil {
			return fmt.Errorf("%q: %w", l.SKU, err)
		}
	}
	return nil
}

// returnRest writes lines, the rest of a returnAll of which some line may
// be written already, without waiting in the SKUs' queues (the
// compare-and-set and the ledger keep the writes right). A return is never
// refused once checked, so only time bounds the attempts: it goes on past a
// done ctx for a bounded time. Its error wraps no ErrContention: a blind
// retry would return twice.
func (m *Manager) returnRest(ctx context.Context, hs HoldStore, lines []inventory.Line, key string) error {
	// The lines go on being returned after ctx ends (outliving): the
	// outcome is read from done only if they were over by then.
	done := make(chan error, 1)
	outliving(ctx, func(ctx context.Context) {
		for _, l := range lines {
			if err := m.returnLine(ctx, hs, l, key, math.MaxInt, false); err != nil {
				done <- fmt.Errorf("%q: %w", l.SKU, err)
				return
			}
		}
		done <- nil
	})
	var err error
	select {
	case err = <-done:
	default:
	}
	if err == nil && ctx.Err() == nil {
		return nil
	}
	return unsettled("some lines may be returned and not others; a retry with the same key finishes the call", errors.Join(err, ctx.Err()))
}

// errUnknown marks an outcome the caller cannot know.
var errUnknown = errors.New("the outcome is unknown")

// returnLine writes one line of returnAll under its SKU's lock: unless
// the ledger has (sku, return, key) already, it reads, checks and
// compare-and-sets, recording the entry, until the write takes or after
// attempts tries or ctx is done. locked says whether to take the SKU's
// lock.
func (m *Manager) returnLine(ctx context.Context, hs HoldStore, l inventory.Line, key string, attempts int, locked bool) error {
	for i := 0; i < attempts && ctx.Err() == nil; i++ {
		done, err := m.returnAttempt(ctx, hs, l, key, locked)
		if done && (attempts < math.MaxInt || !errors.Is(err, inventory.ErrContention)) {
			return err
		}
		// Without a bound, a lock that could not be had in time is one
		// more round.
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: the stock moved under the lock %d times", inventory.ErrContention, attempts)
}

func (m *Manager) returnAttempt(ctx context.Context, hs HoldStore, l inventory.Line, key string, locked bool) (done bool, err error) {
	lost := make(<-chan struct{}) // never closed: no lock, nothing to lose
	if locked {
		lease, err := m.locker.Acquire(ctx, l.SKU)
		if err != nil {
			return true, fmt.Errorf("lock: %w", err)
		}
		defer release(ctx, lease)
		lost = lease.Lost()
	}
	if _, found, err := hs.Seen(ctx, l.SKU, driver.DirReturn, key); err != nil || found {
		return true, unknown(err)
	}
	cur, version, err := m.readLive(ctx, hs, l.SKU)
	if err != nil {
		return true, err
	}
	if err := driver.CheckReturn(cur, l.Qty); err != nil {
		return true, err
	}
	select {
	case <-lost:
		return false, nil // the version check would catch it; go round
	default:
	}
	wctx := ctx
	if n, ok := NoteOf(ctx); ok && m.ledger != nil {
		n.Units = l.Qty
		wctx = WithNote(ctx, n)
	}
	ok, err := hs.CompareAndSet(wctx, l.SKU, version, cur+l.Qty, driver.DirReturn, key)
	switch {
	case errors.Is(err, inventory.ErrDuplicate):
		return true, nil
	case err != nil:
		return true, unknown(err)
	}
	return ok, nil
}

// unknown marks err, if any, as an error whose outcome is unknown.
func unknown(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", err, errUnknown)
}

// Reserve implements [front.Backend].
func (b *backend) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	m := (*Manager)(b)
	hs, err := m.holds()
	if err != nil {
		return err
	}
	return m.reserveHold(ctx, hs, id, lines, ttl, true)
}

// reserveHold is Reserve of hold id. When its order exists it answers as
// used does; with takeOver, it gives up an incomplete order that is
// abandoned, and runs once more.
func (m *Manager) reserveHold(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, ttl time.Duration, takeOver bool) error {
	err := m.reserve(ctx, hs, kindHold+id, lines, ttl)
	if errors.Is(err, inventory.ErrDuplicate) {
		var again func(context.Context) error
		if takeOver {
			again = func(ctx context.Context) error { return m.reserveHold(ctx, hs, id, lines, ttl, false) }
		}
		err = m.used(ctx, hs, kindHold+id, id, again)
	}
	return err
}

// used answers a Reserve of hold id whose order, oid, exists: ErrDuplicate
// once that order is complete (its Reserve took effect). While it is not,
// the Reserve that made it is still holding its lines or giving them back
// (after its ctx ended, or a line was refused), or was cut midway (a
// crash); once the order is abandoned, the abandon grace after it was
// recorded, and again is not nil, used gives it up as Sweep does (giveUp)
// and runs again, the Reserve once more; before, it answers ErrContention.
func (m *Manager) used(ctx context.Context, hs HoldStore, oid, id string, again func(context.Context) error) error {
	o, gone, err := m.orderOrGiveUp(ctx, hs, oid, again != nil)
	if gone {
		return again(ctx)
	}
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		return fmt.Errorf("%w: an earlier Reserve of hold id %q just gave its lines back", inventory.ErrContention, id)
	case err != nil:
		return err
	case !o.Complete:
		return fmt.Errorf("%w: an earlier Reserve of hold id %q is holding or giving back its lines (or was cut midway: its order is given up %v after it was recorded)",
			inventory.ErrContention, id, m.abandon)
	}
	return fmt.Errorf("%w: hold id %q is held, or was used less than the key TTL ago", inventory.ErrDuplicate, id)
}

// orderOrGiveUp reads the order id; with takeOver, an incomplete one that
// is abandoned is given up (giveUp), and gone says so.
func (m *Manager) orderOrGiveUp(ctx context.Context, hs HoldStore, id string, takeOver bool) (o Order, gone bool, err error) {
	o, err = hs.Order(ctx, id)
	if err == nil && !o.Complete && takeOver {
		return m.giveUp(ctx, hs, id)
	}
	return o, false, err
}

// giveUp expires the incomplete order id if it is abandoned (StepExpire
// decides on the store's clock: the abandon grace after the order was
// recorded) and then finishes it as Sweep does (sweepOrder): its lines
// given back, each with the entry Sweep records, and the record deleted.
// gone says the record is no more, so that its id is free; otherwise o is
// the record as it is (held: not abandoned yet, or complete meanwhile).
//
// This is safe for the reason Sweep's give-up is: the call that recorded
// the order stopped holding lines grace/2 after that (reserve), and a
// call that finds its order given up at StepComplete gives back what it
// held; a keyed ReturnLines writes nothing before StepComplete.
func (m *Manager) giveUp(ctx context.Context, hs HoldStore, id string) (o Order, gone bool, err error) {
	o, _, err = m.step(ctx, hs, id, StepExpire, m.maxAttempts)
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		return o, true, nil // given up, or given back by its call, meanwhile
	case err != nil:
		return o, false, err
	case o.State == OrderHeld:
		return o, false, nil
	}
	// Expired, by this call or another that has not finished it yet.
	if _, err := m.finishOrder(ctx, hs, o); err != nil {
		return o, false, err
	}
	return o, !o.Complete, nil
}

// reserve records the order id and holds each line under it, giving back
// what it took when a line is refused. An error that says nothing changed
// (a refusal, ErrContention, ErrNotFound) means that: whatever reserve
// held it gave back first.
func (m *Manager) reserve(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, ttl time.Duration) error {
	// Every write of this call ends well before its order may be
	// abandoned, the grace after it was recorded (after start), when a
	// retry may take the id over (see used): the lines are held within
	// half the grace, the order completed or given back within three
	// quarters. What the give-back leaves, the abandonment gives back.
	start := time.Now()
	o, err := m.createOrder(ctx, hs, id, lines, ttl)
	if err != nil {
		return err
	}
	hctx, cancel := context.WithDeadline(ctx, start.Add(m.abandon/2))
	defer cancel()
	until := start.Add(m.abandon * 3 / 4)
	for i, l := range lines {
		err := m.holdLine(hctx, hs, l, id, o.Expires)
		if err == nil {
			continue
		}
		if ctx.Err() == nil && hctx.Err() != nil {
			err = fmt.Errorf("%w: holding the lines took over %v", inventory.ErrContention, m.abandon/2)
		}
		taken := lines[:i]
		var short *inventory.InsufficientError
		if !errors.As(err, &short) && !errors.Is(err, inventory.ErrNotFound) {
			taken = lines[:i+1] // the failed Hold's outcome may be unknown
		}
		return m.undo(ctx, hs, id, taken, err, until)
	}
	cctx, ccancel := context.WithDeadline(ctx, until)
	defer ccancel()
	_, changed, err := m.step(cctx, hs, id, StepComplete, m.maxAttempts)
	switch {
	case errors.Is(err, inventory.ErrNotFound) || err == nil && !changed:
		// Given up as abandoned while the lines were being held.
		return m.undo(ctx, hs, id, lines, fmt.Errorf("%w: the order was given up before its lines were all held", inventory.ErrContention), until)
	case errors.Is(err, inventory.ErrContention):
		return m.undo(ctx, hs, id, lines, err, until) // the store wrote nothing
	case err != nil:
		return err // unknown: complete, or abandoned later
	}
	return nil
}

// undo gives back the lines of order id that reserve took and deletes the
// order, by until at the latest, and returns cause, why reserve gave up.
// When it cannot, the lines stay held until the order is abandoned (the
// abandon grace after it was recorded: Sweep, or a retry of the call,
// then gives them back), and the error says so without claiming that
// nothing changed.
func (m *Manager) undo(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, cause error, until time.Time) error {
	ref := driver.Ref(ctx) // the call giving back is the one that took
	err := m.giveBack(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithDeadline(ctx, until)
		defer cancel()
		ctx = m.note(ctx, unholdNote(id, OrderHeld, false, ref))
		for _, l := range lines {
			if _, err := m.unhold(ctx, hs, l.SKU, id, false); err != nil {
				return fmt.Errorf("line %q: %w", l.SKU, err)
			}
		}
		return m.abort(ctx, hs, id)
	})
	if err != nil {
		return unsettled(fmt.Sprintf("giving back what the call held failed; it comes back once the order is given up, %v after it was recorded (by Sweep, or a retry of the call)", m.abandon), errors.Join(cause, err))
	}
	return cause
}

// abort deletes the incomplete order id, whose lines are given back.
func (m *Manager) abort(ctx context.Context, hs HoldStore, id string) error {
	_, _, err := m.step(ctx, hs, id, StepAbort, math.MaxInt)
	if errors.Is(err, inventory.ErrNotFound) {
		return nil // given up as abandoned and finished meanwhile
	}
	return err
}

// giveBack runs undo, which gives back what a call took, to its end even
// once ctx is done (bounded as a lock's release is), and returns its error;
// the caller waits for it only while ctx lives, and if it outlives ctx the
// error says so.
func (m *Manager) giveBack(ctx context.Context, undo func(ctx context.Context) error) error {
	done := make(chan error, 1)
	outliving(ctx, func(ctx context.Context) { done <- undo(ctx) })
	select {
	case err := <-done:
		return err
	default:
		return fmt.Errorf("giving back goes on after the call: %w", ctx.Err())
	}
}

// createOrder is CreateOrder, tried again (up to maxAttempts times) when
// the store reports contention (a database deadlock between inserts),
// which wrote nothing.
func (m *Manager) createOrder(ctx context.Context, hs HoldStore, id string, lines []inventory.Line, ttl time.Duration) (Order, error) {
	for i := 1; ; i++ {
		o, err := hs.CreateOrder(ctx, id, lines, ttl, m.abandon)
		if err == nil || !errors.Is(err, inventory.ErrContention) || i >= m.maxAttempts || ctx.Err() != nil {
			return o, err
		}
	}
}

// holdLine takes line l into the hold of order id, under its SKU's lock.
func (m *Manager) holdLine(ctx context.Context, hs HoldStore, l inventory.Line, id string, expires time.Time) error {
	for range m.maxAttempts {
		done, err := m.holdAttempt(ctx, hs, l, id, expires)
		if done {
			if err != nil {
				err = fmt.Errorf("%q: %w", l.SKU, err)
			}
			return err
		}
	}
	return fmt.Errorf("%q: %w: the stock moved under the lock %d times", l.SKU, inventory.ErrContention, m.maxAttempts)
}

func (m *Manager) holdAttempt(ctx context.Context, hs HoldStore, l inventory.Line, id string, expires time.Time) (done bool, err error) {
	lease, err := m.locker.Acquire(ctx, l.SKU)
	if err != nil {
		return true, fmt.Errorf("lock: %w", err)
	}
	defer release(ctx, lease)
	cur, version, err := m.readLive(ctx, hs, l.SKU)
	if err != nil {
		return true, err
	}
	if cur < l.Qty {
		return true, &inventory.InsufficientError{Short: []inventory.Shortfall{{Line: l, Available: cur}}}
	}
	select {
	case <-lease.Lost():
		return true, fmt.Errorf("%w: lock lost before the write", inventory.ErrContention)
	default:
	}
	if m.beforeWrite != nil {
		m.beforeWrite(l.SKU)
	}
	if m.ledger != nil {
		n := holdNote(ctx, id)
		n.Units = l.Qty
		ctx = WithNote(ctx, n)
	}
	ok, err := hs.Hold(ctx, l.SKU, version, cur-l.Qty, id, l.Qty, expires)
	switch {
	case errors.Is(err, inventory.ErrDuplicate):
		return true, nil // a copy of this very Hold ran: the id is this call's
	case err != nil:
		return true, err
	}
	return ok, nil
}

// read is Store.Read, with the lazy release of expired holds when the
// store keeps holds. The caller holds sku's lock.
func (m *Manager) read(ctx context.Context, sku string) (stock, version int64, err error) {
	if hs, ok := m.store.(HoldStore); ok {
		return m.readLive(ctx, hs, sku)
	}
	return m.store.Read(ctx, sku)
}

// readLive reads sku after releasing its expired holds (up to lazyMax of
// them). The caller holds sku's lock.
func (m *Manager) readLive(ctx context.Context, hs HoldStore, sku string) (stock, version int64, err error) {
	stock, version, _, expired, err := hs.ReadHolds(ctx, sku, lazyMax)
	if err != nil || len(expired) == 0 {
		return stock, version, err
	}
	moved := false
	for _, id := range expired {
		if m.pending.skip(id) {
			continue
		}
		n, err := m.expireLine(ctx, hs, sku, id)
		if err != nil {
			return 0, 0, err
		}
		moved = moved || n > 0
	}
	if !moved {
		return stock, version, nil
	}
	stock, version, _, _, err = hs.ReadHolds(ctx, sku, 1)
	return stock, version, err
}

// expireLine settles the expired line (sku, id) as its order's record
// decides, and returns the units it moved.
func (m *Manager) expireLine(ctx context.Context, hs HoldStore, sku, id string) (int64, error) {
	o, _, err := hs.UpdateOrder(ctx, id, StepExpire)
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		// No order: the line outlived an order given up as abandoned
		// while its Reserve still ran.
		return hs.Unhold(m.note(ctx, unholdNote(id, OrderExpired, false, "")), sku, id, false)
	case err != nil:
		return 0, err
	case o.State == OrderHeld:
		// Not expired on the order's clock, or not yet abandoned: its
		// Reserve is still holding lines. Ask again only once it may be:
		// it is abandoned the grace after it was recorded, so at the
		// latest the grace after its expiry (which has passed, as its
		// line's has), when a store of the rule before abandons it.
		again := 10 * time.Millisecond
		if !o.Complete {
			again = max(time.Until(o.Expires.Add(m.abandon)), again)
		}
		m.pending.put(id, time.Now().Add(again))
		return 0, nil
	}
	sold := o.State == OrderConfirmed
	n, err := hs.Unhold(m.note(ctx, unholdNote(id, o.State, sold, "")), sku, id, sold)
	if err == nil && len(o.Lines) == 1 && !o.Done {
		// Its only line: the order is released.
		_, _, _ = hs.UpdateOrder(ctx, id, StepFinish)
	}
	return n, err
}

// Confirm implements [front.Backend].
func (b *backend) Confirm(ctx context.Context, id string) error {
	m := (*Manager)(b)
	return m.onHold(func(hs HoldStore) error {
		_, err := m.confirm(ctx, hs, kindHold+id)
		return err
	})
}

// onHold is the start of Confirm and Cancel: it runs fn on the Manager's
// HoldStore.
func (m *Manager) onHold(fn func(hs HoldStore) error) error {
	hs, err := m.holds()
	if err != nil {
		return err
	}
	return fn(hs)
}

// decide moves order id on by step, StepConfirm or StepCancel, which
// decides the order (of a Confirm, a Cancel and the expiry, exactly one
// wins), and returns the order after it. An order that does not exist, or
// whose Reserve has not finished, is no hold: ErrHoldNotFound.
func (m *Manager) decide(ctx context.Context, hs HoldStore, id string, step OrderStep) (Order, bool, error) {
	o, changed, err := m.step(ctx, hs, id, step, m.maxAttempts)
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		return o, false, inventory.ErrHoldNotFound
	case err != nil:
		return o, false, err
	case !o.Complete:
		return o, false, fmt.Errorf("%w: its Reserve has not finished", inventory.ErrHoldNotFound)
	}
	return o, changed, nil
}

// confirm sells the lines of order id, if the record says so. decided
// reports whether the record was read (the decision made, or found made):
// when it is false nothing changed.
func (m *Manager) confirm(ctx context.Context, hs HoldStore, id string) (decided bool, err error) {
	o, changed, err := m.decide(ctx, hs, id, StepConfirm)
	if err != nil {
		return false, err
	}
	if err := m.finish(ctx, hs, o); err != nil {
		return true, err
	}
	switch {
	case o.State != OrderConfirmed:
		return true, fmt.Errorf("%w: it %s", inventory.ErrHoldReleased, o.State)
	case !changed:
		return true, fmt.Errorf("%w: it was confirmed before", inventory.ErrDuplicate)
	}
	return true, nil
}

// cancel cancels order id (unless it expired or was confirmed first) and
// gives its lines back.
func (m *Manager) cancel(ctx context.Context, hs HoldStore, id string) error {
	o, _, err := m.decide(ctx, hs, id, StepCancel)
	switch {
	case err != nil:
		return err
	case o.State == OrderConfirmed:
		return fmt.Errorf("%w: a refund is a Return", inventory.ErrHoldConfirmed)
	}
	return m.finish(ctx, hs, o)
}

// finish settles (a confirmed order) or gives back (the others) the lines
// of o, then marks it done, unless it is done already.
func (m *Manager) finish(ctx context.Context, hs HoldStore, o Order) error {
	_, err := m.finishOrder(ctx, hs, o)
	return err
}

// finishOrder is finish; finished says this call marked the order done.
// The order is decided: its error never says that nothing changed.
func (m *Manager) finishOrder(ctx context.Context, hs HoldStore, o Order) (finished bool, err error) {
	if o.Done || o.State == OrderHeld {
		return false, nil
	}
	sold := o.State == OrderConfirmed
	uctx := m.note(ctx, unholdNote(o.ID, o.State, sold, ""))
	for _, l := range o.Lines {
		if _, err := m.unhold(uctx, hs, l.SKU, o.ID, sold); err != nil {
			return false, unsettled(fmt.Sprintf("the order is %s; settling its line %q failed (a repeat of the call, or Sweep after the TTL, settles it)", o.State, l.SKU), err)
		}
	}
	_, changed, err := m.step(ctx, hs, o.ID, StepFinish, math.MaxInt)
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		return false, nil // finished and forgotten by another caller
	case err != nil:
		return false, unsettled(fmt.Sprintf("the order is %s and its lines settled; marking it done failed", o.State), err)
	}
	return changed, nil
}

// Cancel implements [front.Backend].
func (b *backend) Cancel(ctx context.Context, id string) error {
	m := (*Manager)(b)
	return m.onHold(func(hs HoldStore) error { return m.cancel(ctx, hs, kindHold+id) })
}

// Held implements [front.Backend]: it reads the SKU's held total.
func (b *backend) Held(ctx context.Context, sku string) (int64, error) {
	hs, err := (*Manager)(b).holds()
	if err != nil {
		return 0, err
	}
	n, err := hs.Held(ctx, sku)
	return n, err
}

// Sweep implements [front.Backend]: it finishes the orders whose
// TTL has passed (and those abandoned), up to SweepLimit of them, and
// counts the holds it released: one per order, whichever Sweep finished
// it. An order whose only line a later call on its SKU released is
// counted by that call, not here.
func (b *backend) Sweep(ctx context.Context) (int, error) {
	m := (*Manager)(b)
	hs, err := m.holds()
	if err != nil {
		return 0, err
	}
	released := 0
	for seen := 0; seen < SweepLimit; {
		ids, err := hs.ExpiredOrders(ctx, sweepBatch)
		if err != nil {
			return released, err
		}
		for _, id := range ids {
			n, err := m.sweepOrder(ctx, hs, id)
			released += n
			if err != nil {
				return released, fmt.Errorf("order %q: %w", id, err)
			}
		}
		seen += len(ids)
		if len(ids) < sweepBatch {
			break
		}
	}
	return released, nil
}

// sweepOrder expires (if due) and finishes order id, and returns 1 when
// this call released a hold.
func (m *Manager) sweepOrder(ctx context.Context, hs HoldStore, id string) (int, error) {
	o, _, err := hs.UpdateOrder(ctx, id, StepExpire)
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		return 0, nil // finished by another caller
	case err != nil:
		return 0, err
	}
	finished, err := m.finishOrder(ctx, hs, o)
	if finished && o.State != OrderConfirmed && !strings.HasPrefix(id, kindReturnKey) {
		return 1, err
	}
	return 0, err
}

// outliving runs fn with a ctx that ends releaseTimeout after ctx does
// (not before: a slow backend under load must not cut a give-back short
// while the caller still waits), and waits for fn while ctx lives.
func outliving(ctx context.Context, fn func(ctx context.Context)) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		fn(dctx)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	t := time.AfterFunc(releaseTimeout, cancel)
	go func() { <-done; t.Stop() }()
}

// unhold is Unhold of a caller that holds no lock. It takes none: a
// release must not wait in the SKU's queue (a Cancel or a give-back that
// timed out there would leave its units held until the order is
// abandoned); a holder of the lock whose compare-and-set it defeats goes
// round again. It asks again while the store is busy (see persist).
func (m *Manager) unhold(ctx context.Context, hs HoldStore, sku, id string, sold bool) (n int64, err error) {
	err = persist(ctx, math.MaxInt, func() error {
		n, err = hs.Unhold(ctx, sku, id, sold)
		return err
	})
	return n, err
}

// step is UpdateOrder, asked again up to attempts times while the store
// is busy (see persist).
func (m *Manager) step(ctx context.Context, hs HoldStore, id string, st OrderStep, attempts int) (o Order, changed bool, err error) {
	err = persist(ctx, attempts, func() error {
		o, changed, err = hs.UpdateOrder(ctx, id, st)
		return err
	})
	return o, changed, err
}

// persist runs call until it returns an error that does not wrap
// inventory.ErrContention (nil included), it has run attempts times, or
// ctx is done, with a short random pause between runs. ErrContention from
// a Store means that it wrote nothing (a busy database, a deadlock): a
// call that took effect must not leave its bookkeeping to it, and one that
// has something to give back must not give up before it has.
func persist(ctx context.Context, attempts int, call func() error) error {
	for i, pause := 1, time.Millisecond; ; i, pause = i+1, min(2*pause, 64*time.Millisecond) {
		err := call()
		if !errors.Is(err, inventory.ErrContention) || i >= attempts {
			return err
		}
		t := time.NewTimer(time.Duration(mrand.Int64N(int64(pause))) + time.Microsecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", err, ctx.Err())
		case <-t.C:
		}
	}
}

// refusals are the sentinels whose errors say that a call changed
// nothing.
var refusals = []error{inventory.ErrContention, inventory.ErrInsufficientStock, inventory.ErrNotFound,
	inventory.ErrInvalidArgument, inventory.ErrHoldReleased, inventory.ErrHoldConfirmed, inventory.ErrDuplicate}

// unsettled is the error of a call that changed something, or may have,
// or left something to be undone later: what says what, and it wraps the
// causes of err (the backend's errors, ctx.Err()) but none of refusals, so
// that no caller takes it for "nothing changed" (nor retries it blindly,
// as ErrContention invites).
func unsettled(what string, err error) error {
	return &unsettledError{msg: what + ": " + err.Error(), causes: causes(err)}
}

type unsettledError struct {
	msg    string
	causes []error
}

func (e *unsettledError) Error() string   { return e.msg }
func (e *unsettledError) Unwrap() []error { return e.causes }

// causes returns the errors of err's tree that wrap none of refusals: err
// itself when it wraps none, otherwise the causes of what it wraps.
func causes(err error) []error {
	if err == nil {
		return nil
	}
	if !slices.ContainsFunc(refusals, func(r error) bool { return errors.Is(err, r) }) {
		return []error{err}
	}
	var out []error
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		out = causes(e.Unwrap())
	case interface{ Unwrap() []error }:
		for _, w := range e.Unwrap() {
			out = append(out, causes(w)...)
		}
	}
	return out
}

// pendingOrders remembers, per process, the orders whose expired lines
// their record would not release yet (a Reserve still holding lines), so
// that every call on their SKUs does not ask again: it only delays a
// release, which Sweep and later calls make.
type pendingOrders struct {
	mu    sync.Mutex
	until map[string]time.Time
}

const maxPending = 10_000

func (p *pendingOrders) skip(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.until[id]
	if ok && !time.Now().Before(u) {
		delete(p.until, id)
		return false
	}
	return ok
}

func (p *pendingOrders) put(id string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until == nil {
		p.until = map[string]time.Time{}
	}
	if len(p.until) >= maxPending {
		now := time.Now()
		for k, u := range p.until {
			if !now.Before(u) {
				delete(p.until, k)
			}
		}
		if len(p.until) >= maxPending {
			return
		}
	}
	p.until[id] = until
}

// randomID returns 32 random hex digits.
func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
