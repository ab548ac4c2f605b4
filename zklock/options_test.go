package zklock_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/optiontest"
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
	optiontest.Run(t, map[string]zklock.Option{
		"root":            zklock.WithRoot("/a/b"),
		"ACL":             zklock.WithACL(zk.WorldACL(zk.PermAll)...),
		"acquire timeout": zklock.WithAcquireTimeout(time.Second),
		"queue depth":     zklock.WithQueueDepth(1),
		"session events":  zklock.WithSessionEvents(events),
		"max attempts":    zklock.WithMaxAttempts(1),
	}, map[string]zklock.Option{
		"empty root":               zklock.WithRoot(""),
		"empty ACL":                zklock.WithACL(),
		"zero acquire timeout":     zklock.WithAcquireTimeout(0),
		"negative acquire timeout": zklock.WithAcquireTimeout(-time.Second),
		"zero queue depth":         zklock.WithQueueDepth(0),
		"negative queue depth":     zklock.WithQueueDepth(-1),
		"nil session events":       zklock.WithSessionEvents(nil),
		"zero max attempts":        zklock.WithMaxAttempts(0),
		"negative max attempts":    zklock.WithMaxAttempts(-1),
	},
		func(o zklock.Option) (any, error) { return zklock.New(conn, store, o) },
		func(o zklock.Option) (any, error) { return zklock.NewLocker(conn, o) },
	)
}
