package rediskeys_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
)

func TestLinesRoundTrip(t *testing.T) {
	lines := []inventory.Line{{SKU: "a", Qty: 3}, {SKU: "b c", Qty: inventory.MaxStock}}
	s := rediskeys.EncodeLines(lines)
	assert.Equal(t, "3 a\n"+"9007199254740991 b c\n", s)
	back, err := rediskeys.DecodeLines(s)
	require.NoError(t, err)
	assert.Equal(t, lines, back)
	_, err = rediskeys.DecodeLines("3a\n")
	assert.ErrorContains(t, err, `bad line "3a"`)
	_, err = rediskeys.DecodeLines("x a\n")
	assert.Error(t, err)
}

func TestRemaining(t *testing.T) {
	n, err := rediskeys.Remaining("42")
	require.NoError(t, err)
	assert.Equal(t, int64(42), n)
	n, err = rediskeys.Remaining("7:token")
	require.NoError(t, err)
	assert.Equal(t, int64(7), n, "an earlier writer's record")
	_, err = rediskeys.Remaining("x")
	assert.Error(t, err)
}
