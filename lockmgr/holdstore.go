package lockmgr

import (
	"context"
	"time"

	"github.com/stockkit/inventory"
)

// HoldStore is a [Store] that also keeps holds, so that a [Manager] over it
// implements [inventory.OrderManager]. redisstore.Store and sqlstore.Store
// implement it. It is optional: a Manager over a plain Store refuses the
// order calls with an error wrapping [errors.ErrUnsupported].
//
// It keeps two kinds of record, which may live on different shards (a Redis
// Cluster puts a SKU's keys in its slot, an order's in another):
//
//   - per SKU, beside the stock: hold lines (sku, id) -> qty with an
//     expiry, and the SKU's held total, the sum of its lines' qty.
//     [HoldStore.Hold] and [HoldStore.Unhold] move units between the stock and the lines, each in one
//     atomic step with the line and the total.
//   - per order id, an [Order] record: its lines, its state, its expiry
//     and two flags. [HoldStore.UpdateOrder] moves it on by one atomic
//     compare-and-set step, which is where a Confirm racing the expiry is
//     decided: exactly one of them wins, whatever shards the lines are on.
//
// The Manager holds a SKU's lock around ReadHolds and Hold, as around Read
// and CompareAndSet. Unhold and the order methods need no lock: each is one
// atomic step, and Unhold moves the SKU's version, so a concurrent
// compare-and-set of the SKU fails and retries.
//
// Clocks: every time here is the backend's clock (Redis TIME on the server
// that holds the record, the database's clock), never the client's. Where
// the SKU's and the order's records live on different servers, their
// clocks may differ a little: a line's expiry only makes it a candidate for
// release (ReadHolds), and the order record's own clock decides.
//
// Ids: the Manager passes order ids of up to [MaxOrderIDLen] bytes of
// UTF-8 without control characters (a kind letter, a colon and a hold id
// or idempotency key), compared byte by byte as SKUs are. Lines are valid
// ([github.com/stockkit/inventory/driver.ValidateLines]). As for Store, a HoldStore need not validate
// again, and every method honours ctx and follows the error rules of the
// Store doc: an error other than those named means nothing was written, or
// that the outcome is unknown.
//
// Resends: a client that may send a command again after losing its reply
// (go-redis does) must not make a repeated step look like another call's:
// CreateOrder and UpdateOrder keep a token of the call in the record and
// answer a copy of a call that ran as that call was answered.
type HoldStore interface {
	Store

	// ReadHolds is Read, and also returns the units held on sku (its held
	// total) and the ids of up to max of its hold lines whose expiry has
	// passed on the backend's clock, earliest expiry first, all read at
	// one moment. max is in 1..100. It must return an error wrapping
	// inventory.ErrNotFound when sku was never initialised.
	ReadHolds(ctx context.Context, sku string, max int) (stock, version, held int64, expired []string, err error)

	// Hold sets the stock of sku to newStock if its version is still
	// version and records the hold line (sku, id) -> qty with expiry
	// expires, adding qty to sku's held total, all in one atomic step (the
	// Manager passes newStock = stock - qty, qty in 1..MaxStock). It
	// returns:
	//   - ok true, nil: all were written.
	//   - ok false, nil: the version moved, or sku is gone; nothing was
	//     written.
	//   - an error wrapping inventory.ErrDuplicate when the line (sku, id)
	//     exists; nothing was written. (The Manager made the order id
	//     unique with CreateOrder, so the line is its own: a copy of this
	//     very call that ran.)
	//   - any other error: as for CompareAndSet.
	Hold(ctx context.Context, sku string, version, newStock int64, id string, qty int64, expires time.Time) (ok bool, err error)

	// Unhold removes the hold line (sku, id), subtracts its qty from sku's
	// held total and, unless sold, adds it back to sku's stock (capped at
	// MaxStock, which only an Init above the held units can reach), moving
	// the version on, all in one atomic step. sold says the units are gone
	// for good (a confirmed order). It returns the line's qty, or 0 with a
	// nil error when there is no such line (it was removed already):
	// nothing was written then, so a repeat is harmless.
	Unhold(ctx context.Context, sku, id string, sold bool) (qty int64, err error)

	// Held returns the held total of sku: the units in its hold lines. It
	// must return an error wrapping inventory.ErrNotFound when sku was
	// never initialised.
	Held(ctx context.Context, sku string) (int64, error)

	// CreateOrder records a new order id with its lines, in state
	// [OrderHeld], not complete, not done, expiring ttl from now on the
	// backend's clock. An order that stays incomplete is abandoned grace
	// after it was recorded, on the backend's clock (now plus grace,
	// whatever ttl is; see StepExpire and ExpiredOrders). It returns the
	// record as written, or an error wrapping inventory.ErrDuplicate when
	// a record of id exists (in any state: a done record is kept for the
	// key TTL, which the store's options set); nothing was written then.
	//
	// The Manager stops holding an order's lines grace/2 after recording
	// it, and gives back what it held when StepComplete does not find the
	// order held: abandoning an incomplete order grace after it was
	// recorded loses no unit and sells none twice, and the hold TTL adds
	// nothing to that; grace bounds how long a Reserve cut by a crash
	// keeps its hold id and its units. A HoldStore that abandons later
	// (the rule before was grace after the order's expiry) stays safe,
	// only slower: such a Reserve keeps them until then.
	CreateOrder(ctx context.Context, id string, lines []inventory.Line, ttl, grace time.Duration) (Order, error)

	// Order returns the record of id, or an error wrapping
	// inventory.ErrNotFound when there is none (never created, aborted,
	// or done more than the key TTL ago).
	Order(ctx context.Context, id string) (Order, error)

	// UpdateOrder applies step to the record of id in one atomic
	// compare-and-set, against the backend's clock now, and returns the
	// record as it is after the step, with changed true when the step
	// changed it. A step whose condition does not hold changes nothing
	// and returns the record as it is (changed false, nil error). The
	// steps and their conditions are those of [OrderStep]. An error
	// wrapping inventory.ErrNotFound means there is no record of id;
	// after StepAbort, or a StepFinish of an incomplete order, there is
	// none (the returned record is the one deleted).
	UpdateOrder(ctx context.Context, id string, step OrderStep) (o Order, changed bool, err error)

	// ExpiredOrders returns the ids of up to max orders that are not done
	// and are due on the backend's clock: past their expiry, or, for an
	// incomplete order (one that StepComplete never reached), once the
	// grace given to CreateOrder has passed since it was recorded (which
	// may be before its expiry). Earliest due first; max is in 1..1000.
	// It writes nothing.
	ExpiredOrders(ctx context.Context, max int) ([]string, error)
}

// MaxOrderIDLen is the longest order id a Manager passes to a HoldStore:
// a kind letter and a colon before a hold id or an idempotency key.
const MaxOrderIDLen = inventory.MaxSKULen + 2

// OrderState is the state of an [Order].
type OrderState string

// The states of an order. An order starts held and moves once, to one of
// the three others, which are final.
const (
	OrderHeld      OrderState = "held"      // units held, not yet sold or given back
	OrderConfirmed OrderState = "confirmed" // sold for good
	OrderCancelled OrderState = "cancelled" // given back by Cancel
	OrderExpired   OrderState = "expired"   // given back when its expiry passed
)

// Order is the record of one order id in a [HoldStore].
type Order struct {
	ID    string
	Lines []inventory.Line // as given to CreateOrder, in that order
	State OrderState

	// Expires is when the hold runs out, on the backend's clock (to the
	// millisecond).
	Expires time.Time

	// Complete says every line was held (StepComplete). An incomplete
	// order is a Reserve in progress, or one that crashed midway.
	Complete bool

	// Done says every line was released or sold (StepFinish): nothing
	// is left to do, and the record is kept only to answer repeats,
	// for the key TTL.
	Done bool
}

// OrderStep is one compare-and-set step of [HoldStore.UpdateOrder]. Each
// applies only when its condition holds on the record, with now the
// backend's clock; otherwise it changes nothing.
type OrderStep string

// The steps.
const (
	// StepComplete: held and not complete -> complete (even past its
	// expiry: the hold then expires as any other).
	StepComplete OrderStep = "complete"

	// StepConfirm: held and complete -> confirmed when now is before the
	// expiry; -> expired when it is not (the expiry wins, and the step
	// reports changed with state expired).
	StepConfirm OrderStep = "confirm"

	// StepCancel: held and complete -> cancelled when now is before the
	// expiry; -> expired when it is not.
	StepCancel OrderStep = "cancel"

	// StepExpire: held -> expired when now is at or past the expiry and
	// the order is complete, or, when it is not, at or past its creation
	// plus the grace given to CreateOrder (abandoned; this may be before
	// its expiry).
	StepExpire OrderStep = "expire"

	// StepFinish: not held and not done -> done, and no longer due
	// (ExpiredOrders). A done record is kept for the key TTL from now and
	// then forgotten (ErrNotFound). An incomplete order is deleted instead
	// of kept: a Reserve that never completed does not use up its id.
	StepFinish OrderStep = "finish"

	// StepAbort: held and not complete -> deleted (a Reserve that gave
	// back what it held).
	StepAbort OrderStep = "abort"
)
