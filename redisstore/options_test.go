package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/redisstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: the client points nowhere).
func TestOptionsRule(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name string
		opt  redisstore.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"prefix", redisstore.WithPrefix("p"), true},
		{"empty prefix", redisstore.WithPrefix(""), false},
		{"key TTL", redisstore.WithKeyTTL(time.Second), true},
		{"zero key TTL", redisstore.WithKeyTTL(0), false},
		{"negative key TTL", redisstore.WithKeyTTL(-time.Second), false},
		{"replicas", redisstore.WithReplicas(1, time.Second), true},
		{"zero replicas", redisstore.WithReplicas(0, time.Second), false},
		{"negative replicas", redisstore.WithReplicas(-1, time.Second), false},
		{"zero replica timeout", redisstore.WithReplicas(1, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redisstore.New(c, tc.opt)
			if tc.ok {
				require.NoError(t, err)
				require.NotNil(t, s)
				return
			}
			require.ErrorIs(t, err, inventory.ErrInvalidArgument)
			require.Nil(t, s)
		})
	}
}
