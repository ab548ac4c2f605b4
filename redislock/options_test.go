package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New and
// NewLocker (which do no I/O: the client points nowhere).
func TestOptionsRule(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	store, err := redisstore.New(c)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opt  redislock.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"prefix", redislock.WithPrefix("p"), true},
		{"empty prefix", redislock.WithPrefix(""), false},
		{"TTL", redislock.WithTTL(time.Second), true},
		{"zero TTL", redislock.WithTTL(0), false},
		{"negative TTL", redislock.WithTTL(-time.Second), false},
		{"acquire timeout", redislock.WithAcquireTimeout(time.Second), true},
		{"zero acquire timeout", redislock.WithAcquireTimeout(0), false},
		{"negative acquire timeout", redislock.WithAcquireTimeout(-time.Second), false},
		{"max attempts", redislock.WithMaxAttempts(1), true},
		{"zero max attempts", redislock.WithMaxAttempts(0), false},
		{"negative max attempts", redislock.WithMaxAttempts(-1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := redislock.New(c, store, tc.opt)
			l, lerr := redislock.NewLocker(c, tc.opt)
			if tc.ok {
				require.NoError(t, err)
				require.NotNil(t, m)
				require.NoError(t, lerr)
				require.NotNil(t, l)
				return
			}
			require.ErrorIs(t, err, inventory.ErrInvalidArgument)
			require.Nil(t, m)
			require.ErrorIs(t, lerr, inventory.ErrInvalidArgument)
			require.Nil(t, l)
		})
	}
}
