// Package lockmgrtest is the conformance suite for the seams of [lockmgr]:
// [RunStore] for a [lockmgr.Store], [RunHoldStore] for a
// [lockmgr.HoldStore] and [RunLocker] for a [lockmgr.Locker]. [MemoryStore]
// is a HoldStore in memory, the reference the suites are checked against. It stands beside inventorytest.Run, which tests the
// whole [inventory.StockManager]: that suite cannot see a lock that fails to
// exclude, because the Store's compare-and-set hides it; this one can.
//
// A backend's conformance test is a harness plus one call:
//
//	func TestLockerConformance(t *testing.T) {
//		lockmgrtest.RunLocker(t, lockmgrtest.LockerConfig{
//			NewLocker: func(t *testing.T) lockmgr.Locker {
//				return mylock.NewLocker(client) // release resources with t.Cleanup
//			},
//			Lapse: func(t *testing.T, l lockmgr.Locker, name string) {
//				// make the lock on name lapse, as if its holder had paused
//			},
//		})
//	}
//
// Each subtest makes fresh Lockers (or a fresh Store) and uses names with a
// random prefix, so runs sharing a server never see each other's data. The
// concurrent subtests are meant to run under the race detector.
package lockmgrtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// names are odd but valid SKUs: each must name its own lock and its own
// stock, byte for byte (no case folding, no trimming, no normalisation).
var names = []string{
	"sku", "SKU", "sku ", " sku", "Sku", "{sku}", "{", "}", "a:b", "a/b", "a%b", "a_b",
	"'; DROP TABLE stock; --", "\"quoted\"", "商品-42", "e\u0301", "\u00e9", "日本語 テスト",
	strings.Repeat("x", 200),
}

// prefix is a random prefix for one run, with the subtest's name.
func prefix(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	sub := t.Name()
	if i := strings.LastIndexByte(sub, '/'); i >= 0 {
		sub = sub[i+1:]
	}
	return "lt" + hex.EncodeToString(b) + "-" + sub + "/"
}

func timeoutCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// cmp is n, or def when n is not positive.
func cmp[T int | time.Duration](n, def T) T {
	if n <= 0 {
		return def
	}
	return n
}

// subtest is one subtest of a store suite: it gets a ctx bounded by the
// suite's timeout, a fresh store and a prefix of its own for its names.
type subtest[S any] struct {
	name string
	fn   func(t *testing.T, ctx context.Context, s S, prefix string)
}

// runSubtests runs each of tests as a subtest of t on a store from newStore.
func runSubtests[S any](t *testing.T, timeout time.Duration, newStore func(*testing.T) S, tests []subtest[S]) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, timeoutCtx(t, timeout), newStore(t), prefix(t))
		})
	}
}

// with is the subtest fn with its last argument v, a setting of the
// suite's config.
func with[S, V any](v V, fn func(*testing.T, context.Context, S, string, V)) func(*testing.T, context.Context, S, string) {
	return func(t *testing.T, ctx context.Context, s S, p string) { fn(t, ctx, s, p, v) }
}
