package lockmgrtest

import "time"

// NewBrokenMemoryStore returns a MemoryStore that breaks the rule broken
// names ("" for none): see brokenHoldStores in lockmgrtest_test.go.
func NewBrokenMemoryStore(broken string, keyTTL time.Duration) *MemoryStore {
	s := NewMemoryStore(keyTTL)
	s.broken = broken
	return s
}
