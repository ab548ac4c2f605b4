package rowlock

// SetAfterLock makes f run while a call holds the row lock, between its
// lock and its write; set it before any call.
func SetAfterLock(m *Manager, f func(sku string)) { m.afterLock = f }
