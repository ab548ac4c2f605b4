// Package optiontest checks constructors against the options rule of
// package inventory: a nil option is ignored, and an out-of-range value
// makes a constructor fail with an error wrapping
// inventory.ErrInvalidArgument, returning no value. The constructors under
// test must do no I/O.
package optiontest

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

// Run runs a subtest per option, named by its key, and one for a nil
// option, calling each constructor with that option alone: an accepted
// option (and nil) gives a non-nil value and no error, a refused one a nil
// value and an error wrapping inventory.ErrInvalidArgument.
func Run[O any](t *testing.T, accepted, refused map[string]O, constructors ...func(O) (any, error)) {
	t.Helper()
	var none O
	check := func(name string, opt O, ok bool) {
		t.Run(name, func(t *testing.T) {
			for i, build := range constructors {
				v, err := build(opt)
				if ok {
					require.NoError(t, err, "constructor %d", i)
					require.NotNil(t, v, "constructor %d", i)
					continue
				}
				require.ErrorIs(t, err, inventory.ErrInvalidArgument, "constructor %d", i)
				require.Nil(t, v, "constructor %d", i)
			}
		})
	}
	check("nil", none, true)
	for _, name := range slices.Sorted(maps.Keys(accepted)) {
		check(name, accepted[name], true)
	}
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		check(name, refused[name], false)
	}
}
