package lockmgr

// MustNew is NewManager for tests whose arguments are valid: it panics on
// an error.
func MustNew(l Locker, s Store, opts ...Option) *Manager {
	m, err := NewManager(l, s, opts...)
	if err != nil {
		panic(err)
	}
	return m
}

// SetBeforeWrite makes m call f between its checks and its conditional
// write, where a paused holder's lock may lapse.
func SetBeforeWrite(m *Manager, f func(sku string)) { m.beforeWrite = f }
