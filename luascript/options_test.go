package luascript_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/luascript"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: the client points nowhere).
func TestOptionsRule(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	optiontest.Run(t, map[string]luascript.Option{
		"refusals": luascript.WithRefusals(time.Second),
		"prefix":   luascript.WithPrefix("p"),
		"key TTL":  luascript.WithKeyTTL(time.Second),
		"replicas": luascript.WithReplicas(1, time.Second),
	}, map[string]luascript.Option{
		"zero refusal TTL":     luascript.WithRefusals(0),
		"refusal TTL over 10s": luascript.WithRefusals(11 * time.Second),
		"empty prefix":         luascript.WithPrefix(""),
		"zero key TTL":         luascript.WithKeyTTL(0),
		"negative key TTL":     luascript.WithKeyTTL(-time.Second),
		"zero replicas":        luascript.WithReplicas(0, time.Second),
		"negative replicas":    luascript.WithReplicas(-1, time.Second),
		"zero replica timeout": luascript.WithReplicas(1, 0),
	}, func(o luascript.Option) (any, error) { return luascript.New(c, o) })
}
