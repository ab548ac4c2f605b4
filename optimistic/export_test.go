package optimistic

// Hooks for the benchmarks.

// WithMaxBatch caps how many queued calls of one SKU a batch takes at
// once; 1 leaves only the per-SKU gate.
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// Counts returns the writes tried after a read and the ones that lost.
func (m *Manager) Counts() (attempts, conflicts int64) {
	return m.writes.Load(), m.conflicts.Load()
}

// Together returns how many moves ran in a transaction with others (on
// SQLite).
func (m *Manager) Together() int64 { return m.together.Load() }

// SetBeforeCAS makes f run before each write of a batch, in the combining
// mode: between the reads of an attempt on the read path and its write, or
// before the conditional UPDATE of the direct path; set it before any call.
func SetBeforeCAS(m *Manager, f func(sku string)) { m.beforeCAS = f }

// SetReadFirst makes every batch take the read path, never the direct
// conditional UPDATE; set it before any call.
func SetReadFirst(m *Manager) { m.casOnly = true }
