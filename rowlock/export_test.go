package rowlock

// SetAfterLock makes f run while a call holds its row locks, between its
// locks and its writes; set it before any call.
func SetAfterLock(m *Manager, f func(skus []string)) { m.o.AfterLock = f }
