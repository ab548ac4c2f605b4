package zklock_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/zklock"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New and
// NewLocker (which do no I/O).
func TestOptionsRule(t *testing.T) {
	conn := testenv.ZooKeeper(t)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	store, err := redisstore.New(c)
	require.NoError(t, err)
	events := make(chan zk.Event)
	defer close(events) // ends the session watchers
	for _, tc := range []struct {
		name string
		opt  zklock.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"root", zklock.WithRoot("/a/b"), true},
		{"empty root", zklock.WithRoot(""), false},
		{"ACL", zklock.WithACL(zk.WorldACL(zk.PermAll)...), true},
		{"empty ACL", zklock.WithACL(), false},
		{"acquire timeout", zklock.WithAcquireTimeout(time.Second), true},
		{"zero acquire timeout", zklock.WithAcquireTimeout(0), false},
		{"negative acquire timeout", zklock.WithAcquireTimeout(-time.Second), false},
		{"queue depth", zklock.WithQueueDepth(1), true},
		{"zero queue depth", zklock.WithQueueDepth(0), false},
		{"negative queue depth", zklock.WithQueueDepth(-1), false},
		{"session events", zklock.WithSessionEvents(events), true},
		{"nil session events", zklock.WithSessionEvents(nil), false},
		{"max attempts", zklock.WithMaxAttempts(1), true},
		{"zero max attempts", zklock.WithMaxAttempts(0), false},
		{"negative max attempts", zklock.WithMaxAttempts(-1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := zklock.New(conn, store, tc.opt)
			l, lerr := zklock.NewLocker(conn, tc.opt)
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
