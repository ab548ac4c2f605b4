package segment

// SetRedisHook sets the hook that runs after each step of a Redis
// transfer (see hook) and returns a function that restores the previous
// one. Set it while no call is in flight.
func SetRedisHook(f func(step string) error) (restore func()) {
	old := hook
	hook = f
	return func() { hook = old }
}

// SegKey is the key of segment i of sku.
func (m *Redis) SegKey(sku string, i int) string { return m.segKey(sku, i) }
