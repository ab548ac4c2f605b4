package redlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New and
// NewLocker (which do no I/O: the clients point nowhere).
func TestOptionsRule(t *testing.T) {
	var clients []redis.UniversalClient
	for range redlock.MinNodes {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		defer c.Close()
		clients = append(clients, c)
	}
	store, err := redisstore.New(clients[0])
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opt  redlock.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"prefix", redlock.WithPrefix("p:"), true},
		{"empty prefix", redlock.WithPrefix(""), false},
		{"expiry", redlock.WithExpiry(time.Second), true},
		{"zero expiry", redlock.WithExpiry(0), false},
		{"negative expiry", redlock.WithExpiry(-time.Second), false},
		{"acquire timeout", redlock.WithAcquireTimeout(time.Second), true},
		{"zero acquire timeout", redlock.WithAcquireTimeout(0), false},
		{"negative acquire timeout", redlock.WithAcquireTimeout(-time.Second), false},
		{"retry delay", redlock.WithRetryDelay(time.Millisecond, time.Millisecond), true},
		{"zero retry delay", redlock.WithRetryDelay(0, time.Millisecond), false},
		{"retry delay hi below lo", redlock.WithRetryDelay(2*time.Millisecond, time.Millisecond), false},
		{"max attempts", redlock.WithMaxAttempts(1), true},
		{"zero max attempts", redlock.WithMaxAttempts(0), false},
		{"negative max attempts", redlock.WithMaxAttempts(-1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := redlock.New(clients, store, tc.opt)
			l, lerr := redlock.NewLocker(clients, tc.opt)
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
