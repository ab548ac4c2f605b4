package lockmgr

// SetBeforeWrite makes m call f between its checks and its conditional
// write, where a paused holder's lock may lapse.
func SetBeforeWrite(m *Manager, f func(sku string)) { m.beforeWrite = f }

// QueuedCallers returns how many callers are at name, admitted or waiting,
// in the queue of l, a Locker of NewQueuedLocker with leases of type L.
func QueuedCallers[L Lease](l Locker, name string) int {
	q := l.(*queued[L]).queue
	q.mu.Lock()
	defer q.mu.Unlock()
	if ln := q.lines[name]; ln != nil {
		return ln.callers
	}
	return 0
}
