package redlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/optiontest"
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
	optiontest.Run(t, map[string]redlock.Option{
		"prefix":          redlock.WithPrefix("p:"),
		"expiry":          redlock.WithExpiry(time.Second),
		"acquire timeout": redlock.WithAcquireTimeout(time.Second),
		"retry delay":     redlock.WithRetryDelay(time.Millisecond, time.Millisecond),
		"max attempts":    redlock.WithMaxAttempts(1),
	}, map[string]redlock.Option{
		"empty prefix":             redlock.WithPrefix(""),
		"zero expiry":              redlock.WithExpiry(0),
		"negative expiry":          redlock.WithExpiry(-time.Second),
		"zero acquire timeout":     redlock.WithAcquireTimeout(0),
		"negative acquire timeout": redlock.WithAcquireTimeout(-time.Second),
		"zero retry delay":         redlock.WithRetryDelay(0, time.Millisecond),
		"retry delay hi below lo":  redlock.WithRetryDelay(2*time.Millisecond, time.Millisecond),
		"zero max attempts":        redlock.WithMaxAttempts(0),
		"negative max attempts":    redlock.WithMaxAttempts(-1),
	},
		func(o redlock.Option) (any, error) { return redlock.New(clients, store, o) },
		func(o redlock.Option) (any, error) { return redlock.NewLocker(clients, o) },
	)
}
