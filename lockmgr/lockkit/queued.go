package lockkit

import (
	"context"
	"fmt"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
)

// QueuedConfig configures a Locker made by [NewQueuedLocker].
type QueuedConfig struct {
	// Name prefixes the Locker's errors ("sqllock: lock ...").
	Name string

	// AcquireTimeout bounds an Acquire, the wait in the queue included;
	// it must be positive. Past it, Acquire fails with an error wrapping
	// inventory.ErrContention.
	AcquireTimeout time.Duration

	// Queue configures the in-process queue: its depth, hand-over and
	// cleanup (see [QueueConfig]).
	Queue QueueConfig
}

// TakeFunc takes the lock on name, shared with other processes, for a
// caller admitted by the queue: the part of a Locker that talks to its
// backend. actx is ctx bounded by the acquire timeout; it bounds every
// request, and ctx tells the caller's cancellation from the timeout. turn
// is the caller's place in the queue ([Turn.Alone], [Turn.Share]). On
// error nothing is held, and the error says why, prefixed with the
// Locker's name.
type TakeFunc[L lockmgr.Lease] func(ctx, actx context.Context, name string, turn *Turn[L]) (L, error)

// NewQueuedLocker returns a Locker whose callers of one name wait in an
// in-process [Queue], in arrival order, and call take once admitted. Its
// Acquire checks ctx first, bounds the whole wait by the acquire timeout,
// and fails with inventory.ErrContention when the queue admits the caller
// too late. Its Leases are take's, wrapped: Release hands a lease that is
// not lost, still held, to the next caller in the queue while hand-over
// allows it ([QueueConfig.MaxHandOvers]); otherwise it calls the lease's
// own Release (which frees the lock) and then leaves the queue. A take's
// lease therefore knows nothing of the queue. It does no I/O.
func NewQueuedLocker[L lockmgr.Lease](cfg QueuedConfig, take TakeFunc[L]) (lockmgr.Locker, error) {
	switch {
	case take == nil:
		return nil, fmt.Errorf("%w: lockmgr: nil take", inventory.ErrInvalidArgument)
	case cfg.AcquireTimeout <= 0:
		return nil, fmt.Errorf("%w: %s: acquire timeout %v is not positive", inventory.ErrInvalidArgument, cfg.Name, cfg.AcquireTimeout)
	}
	return &queued[L]{cfg: cfg, take: take, queue: NewQueue[L](cfg.Queue)}, nil
}

// queued is the Locker of NewQueuedLocker.
type queued[L lockmgr.Lease] struct {
	cfg   QueuedConfig
	take  TakeFunc[L]
	queue *Queue[L]
}

// Acquire implements [lockmgr.Locker].
func (q *queued[L]) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: lock %q: %w", q.cfg.Name, name, err)
	}
	actx, cancel := context.WithTimeout(ctx, q.cfg.AcquireTimeout)
	defer cancel()
	turn, le, handed, err := q.queue.Enter(actx, name)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("%s: lock %q: %w", q.cfg.Name, name, ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("%s: lock %q: %w: still queued behind this process's other callers after %v",
			q.cfg.Name, name, inventory.ErrContention, q.cfg.AcquireTimeout)
	case !handed:
		if le, err = q.take(ctx, actx, name, turn); err != nil {
			turn.Leave(ctx)
			return nil, err
		}
	}
	return &queuedLease[L]{lease: le, turn: turn}, nil
}

// queuedLease is a lease of take's and its holder's place in the queue.
type queuedLease[L lockmgr.Lease] struct {
	lease L
	turn  *Turn[L]
}

// Lost implements [lockmgr.Lease].
func (h *queuedLease[L]) Lost() <-chan struct{} { return h.lease.Lost() }

// Release implements [lockmgr.Lease]: a hand-over, or the lease's own Release
// followed by leaving the queue.
func (h *queuedLease[L]) Release(ctx context.Context) error {
	select {
	case <-h.lease.Lost():
	default:
		if h.turn.HandOver(h.lease) {
			return nil
		}
	}
	defer h.turn.Leave(ctx)
	return h.lease.Release(ctx)
}
