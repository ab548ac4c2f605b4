package lockmgr_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/lockmgr"
)

// TestOptionsRule checks NewManager against the options rule of the root
// package, as every other constructor is checked.
func TestOptionsRule(t *testing.T) {
	optiontest.Run(t, map[string]lockmgr.Option{
		"name":           lockmgr.WithName("x"),
		"max attempts 1": lockmgr.WithMaxAttempts(1),
		"max attempts 5": lockmgr.WithMaxAttempts(5),
	}, map[string]lockmgr.Option{
		"zero max attempts":     lockmgr.WithMaxAttempts(0),
		"negative max attempts": lockmgr.WithMaxAttempts(-1),
	}, func(o lockmgr.Option) (any, error) {
		return lockmgr.NewManager(newFakeLocker(0), newMemStore(), o)
	})
}

func TestNewManagerRefuses(t *testing.T) {
	m, err := lockmgr.NewManager(nil, newMemStore())
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "nil Locker")
	require.Nil(t, m)
	m, err = lockmgr.NewManager(newFakeLocker(0), nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "nil Store")
	require.Nil(t, m)
	_, err = lockmgr.NewManager(newFakeLocker(0), newMemStore(), lockmgr.WithName("mylock"), lockmgr.WithMaxAttempts(0))
	require.ErrorContains(t, err, "mylock: max attempts 0 is below 1")
	_, err = lockmgr.NewManager(newFakeLocker(0), newMemStore(), lockmgr.WithMaxAttempts(0), lockmgr.WithMaxAttempts(2))
	require.NoError(t, err, "the last WithMaxAttempts wins")
}

// TestNewManagerAttempts: the Manager NewManager returns tries as often as
// WithMaxAttempts says.
func TestNewManagerAttempts(t *testing.T) {
	ctx := context.Background()
	l := newFakeLocker(0)
	m, err := lockmgr.NewManager(l, movingStore{newMemStore()}, lockmgr.WithMaxAttempts(4))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 5))
	_, err = m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, inventory.ErrContention)
	require.EqualValues(t, 4, l.acquired.Load())
}
