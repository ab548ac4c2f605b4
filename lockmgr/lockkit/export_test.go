package lockkit

import "github.com/stockkit/inventory/lockmgr"

// QueuedCallers returns how many callers are at name, admitted or waiting,
// in the queue of l, a Locker of NewQueuedLocker with leases of type L.
func QueuedCallers[L lockmgr.Lease](l lockmgr.Locker, name string) int {
	q := l.(*queued[L]).queue
	q.mu.Lock()
	defer q.mu.Unlock()
	if ln := q.lines[name]; ln != nil {
		return ln.callers
	}
	return 0
}
