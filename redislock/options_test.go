package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/optiontest"
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
	optiontest.Run(t, map[string]redislock.Option{
		"prefix":          redislock.WithPrefix("p"),
		"TTL":             redislock.WithTTL(time.Second),
		"acquire timeout": redislock.WithAcquireTimeout(time.Second),
		"max attempts":    redislock.WithMaxAttempts(1),
	}, map[string]redislock.Option{
		"empty prefix":             redislock.WithPrefix(""),
		"zero TTL":                 redislock.WithTTL(0),
		"negative TTL":             redislock.WithTTL(-time.Second),
		"zero acquire timeout":     redislock.WithAcquireTimeout(0),
		"negative acquire timeout": redislock.WithAcquireTimeout(-time.Second),
		"zero max attempts":        redislock.WithMaxAttempts(0),
		"negative max attempts":    redislock.WithMaxAttempts(-1),
	},
		func(o redislock.Option) (any, error) { return redislock.New(c, store, o) },
		func(o redislock.Option) (any, error) { return redislock.NewLocker(c, o) },
	)
}
