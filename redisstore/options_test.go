package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/redisstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: the client points nowhere).
func TestOptionsRule(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	optiontest.Run(t, map[string]redisstore.Option{
		"prefix":   redisstore.WithPrefix("p"),
		"key TTL":  redisstore.WithKeyTTL(time.Second),
		"replicas": redisstore.WithReplicas(1, time.Second),
	}, map[string]redisstore.Option{
		"empty prefix":         redisstore.WithPrefix(""),
		"zero key TTL":         redisstore.WithKeyTTL(0),
		"negative key TTL":     redisstore.WithKeyTTL(-time.Second),
		"zero replicas":        redisstore.WithReplicas(0, time.Second),
		"negative replicas":    redisstore.WithReplicas(-1, time.Second),
		"zero replica timeout": redisstore.WithReplicas(1, 0),
	}, func(o redisstore.Option) (any, error) { return redisstore.New(c, o) })
}
