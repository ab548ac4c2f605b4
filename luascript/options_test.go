package luascript_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/luascript"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: the client points nowhere).
func TestOptionsRule(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name string
		opt  luascript.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"prefix", luascript.WithPrefix("p"), true},
		{"empty prefix", luascript.WithPrefix(""), false},
		{"key TTL", luascript.WithKeyTTL(time.Second), true},
		{"zero key TTL", luascript.WithKeyTTL(0), false},
		{"negative key TTL", luascript.WithKeyTTL(-time.Second), false},
		{"replicas", luascript.WithReplicas(1, time.Second), true},
		{"zero replicas", luascript.WithReplicas(0, time.Second), false},
		{"negative replicas", luascript.WithReplicas(-1, time.Second), false},
		{"zero replica timeout", luascript.WithReplicas(1, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := luascript.New(c, tc.opt)
			if tc.ok {
				require.NoError(t, err)
				require.NotNil(t, m)
				return
			}
			require.ErrorIs(t, err, inventory.ErrInvalidArgument)
			require.Nil(t, m)
		})
	}
}
