package lockmgr

// SetBeforeWrite makes m call f between its checks and its conditional
// write, where a paused holder's lock may lapse.
func SetBeforeWrite(m *Manager, f func(sku string)) { m.beforeWrite = f }
