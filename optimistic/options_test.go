package optimistic_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value or a schema name that is no identifier
// is ErrInvalidArgument from New, which does no I/O (the pool has no
// database behind it).
func TestOptionsRule(t *testing.T) {
	db := sqlx.NewDb(nil, "mysql")
	optiontest.Run(t, map[string]optimistic.Option{
		"refusals":         optimistic.WithRefusals(time.Second),
		"key TTL":          optimistic.WithKeyTTL(time.Second),
		"max attempts":     optimistic.WithMaxAttempts(1),
		"backoff":          optimistic.WithBackoff(time.Millisecond, time.Millisecond),
		"single statement": optimistic.WithSingleStatement(),
	}, map[string]optimistic.Option{
		"zero refusal TTL":       optimistic.WithRefusals(0),
		"refusal TTL over 10s":   optimistic.WithRefusals(11 * time.Second),
		"injected table":         optimistic.WithSchema(sqlstore.Schema{Table: "x; DROP TABLE y"}),
		"injected column":        optimistic.WithSchema(sqlstore.Schema{Stock: "stock = 0 --"}),
		"zero key TTL":           optimistic.WithKeyTTL(0),
		"negative key TTL":       optimistic.WithKeyTTL(-time.Second),
		"zero max attempts":      optimistic.WithMaxAttempts(0),
		"negative max attempts":  optimistic.WithMaxAttempts(-1),
		"zero backoff":           optimistic.WithBackoff(0, time.Millisecond),
		"backoff max below base": optimistic.WithBackoff(2*time.Millisecond, time.Millisecond),
	}, func(o optimistic.Option) (any, error) { return optimistic.New(db, o) })
	_, err := optimistic.New(sqlx.NewDb(nil, "oracle"))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "unknown driver")
}
