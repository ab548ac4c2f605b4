// Package mergetest holds the checks that the tests of luascript and
// tiered share for their merged calls (package merge): many keyed buyers
// of one unit each on little stock, whose answers must each be their own
// although their calls went to Redis in batches, and the count of the
// script calls the calls took.
//
// It is a test-support package: only tests import it.
package mergetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

// Answer is what one buyer's call returned: the idempotency key it used,
// the remaining it was told and its error.
type Answer struct {
	Key  string
	Left int64
	Err  error
}

// Buyers runs n buyers at once, buyer i calling reduce with the key
// "buyer-<i mod 3n/4>" (a quarter of the keys are used twice), and returns
// their answers, buyer i's at i.
func Buyers(n int, reduce func(key string) (int64, error)) []Answer {
	answers := make([]Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("buyer-", i%(n*3/4))
			left, err := reduce(key)
			answers[i] = Answer{key, left, err}
		}()
	}
	wg.Wait()
	return answers
}

// CheckAnswers checks the answers of buyers of one unit each on a SKU of
// stock units: no key sold twice, every success was told its own
// remaining (together exactly 0..stock-1), a call refused as a duplicate
// was told its key's first call's remaining, a call refused for want of
// stock was told 0; any other error fails t.
func CheckAnswers(t testing.TB, stock int, answers []Answer) {
	t.Helper()
	var lefts []int64
	sold := map[string]int64{}
	for _, a := range answers {
		if a.Err == nil {
			lefts = append(lefts, a.Left)
			_, twice := sold[a.Key]
			require.False(t, twice, "key %s sold twice", a.Key)
			sold[a.Key] = a.Left
		}
	}
	slices.Sort(lefts)
	want := make([]int64, stock)
	for i := range want {
		want[i] = int64(i)
	}
	require.Equal(t, want, lefts, "each success saw its own remaining")
	for _, a := range answers {
		switch {
		case a.Err == nil:
		case errors.Is(a.Err, inventory.ErrDuplicate):
			first, ok := sold[a.Key]
			require.True(t, ok, "duplicate of a key that never sold: %v", a.Err)
			require.Equal(t, first, a.Left, "a duplicate returns the first call's remaining")
		case errors.Is(a.Err, inventory.ErrInsufficientStock):
			require.Zero(t, a.Left)
		default:
			t.Fatalf("unexpected error %v", a.Err)
		}
	}
}

// CheckMerged checks the script calls that calls calls took, single of
// them alone and the others in batches of the sizes given: calls were
// merged (a batch at least, and fewer script calls than calls), and every
// batch holds from 2 to maxBatch calls.
func CheckMerged(t testing.TB, calls, single int, batches []int, maxBatch int) {
	t.Helper()
	require.NotEmpty(t, batches, "calls were merged")
	require.Less(t, single+len(batches), calls)
	for _, n := range batches {
		require.LessOrEqual(t, n, maxBatch, "batch size bounded")
		require.GreaterOrEqual(t, n, 2)
	}
}

// CheckLoneCalls makes n calls one after another, call i with the key
// "<i mod keys>" (keys < n): the first keys calls succeed, the others are
// refused as duplicates, and counts (the script calls made since before
// the first: alone, and the sizes of the batches) says each went alone.
func CheckLoneCalls(t testing.TB, n, keys int, reduce func(key string) error, counts func() (single int, batches []int)) {
	t.Helper()
	for i := range n {
		err := reduce(fmt.Sprint(i % keys))
		if i >= keys {
			require.ErrorIs(t, err, inventory.ErrDuplicate)
		} else {
			require.NoError(t, err)
		}
	}
	single, batches := counts()
	require.Equal(t, n, single)
	require.Empty(t, batches)
}
