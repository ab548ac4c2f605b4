package redisledger

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/ledger"
)

// TestRuns: a run of records (ledger.lua) reads back as its records, each
// with its position, its stock after it and its Held and Sold; a run that
// ledger.lua cannot write is an error.
func TestRuns(t *testing.T) {
	msg := redis.XMessage{ID: "1700000000000-9", Values: map[string]any{"e": "3 7\nreduce 1 5 3\n\n\n\nreturn 2 7\nk\nr\n"}}
	es, err := appendEntries(nil, "sku", msg, 0, 10)
	require.NoError(t, err)
	type got struct {
		pos            int64
		kind           ledger.Kind
		units, av      int64
		held, sold     int64
		key, ref, hold string
	}
	var gots []got
	for _, e := range es {
		gots = append(gots, got{e.Pos, e.Kind, e.Units, e.After.Available, e.After.Held, e.After.Sold, e.Key, e.Ref, e.Hold})
	}
	base := int64(1700000000000) * posSeqs
	require.Equal(t, []got{
		{base + 6, ledger.Reduce, 1, 7, 3, 7, "", "", ""},
		{base + 7, ledger.Reduce, 1, 6, 3, 8, "", "", ""},
		{base + 8, ledger.Reduce, 1, 5, 3, 9, "", "", ""},
		{base + 9, ledger.Return, 2, 7, 3, 7, "k", "r", ""},
	}, gots)
	page, err := appendEntries(nil, "sku", msg, base+7, 1) // from inside the run
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, base+8, page[0].Pos)

	for _, bad := range []string{
		"0 0\nreduce 1 5 1\n\n\n",       // a run of one
		"0 0\nreserve 1 5 3\n\n\n",      // not a reduce or return
		"0 0\nreduce 1 5 3\nk\n\n",      // with a key
		"0 0\nreduce 0 5 3\n\n\n",       // no units
		"0 0\nreduce 1 5 3 4\n\n\n",     // five fields
		"0 0\nreduce 1 5 x\n\n\n",       // not a number
		"0 0\nreduce 1 5 2000000\n\n\n", // more than a millisecond's positions
	} {
		_, err := records(bad)
		require.Error(t, err, "%q", bad)
	}
}
