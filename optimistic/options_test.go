package optimistic_test

import (
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/optimistic"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: sqlx.Open does not connect).
func TestOptionsRule(t *testing.T) {
	db, err := sqlx.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	require.NoError(t, err)
	defer db.Close()
	optiontest.Run(t, map[string]optimistic.Option{
		"key TTL":          optimistic.WithKeyTTL(time.Second),
		"max attempts":     optimistic.WithMaxAttempts(1),
		"backoff":          optimistic.WithBackoff(time.Millisecond, time.Millisecond),
		"single statement": optimistic.WithSingleStatement(),
	}, map[string]optimistic.Option{
		"zero key TTL":           optimistic.WithKeyTTL(0),
		"negative key TTL":       optimistic.WithKeyTTL(-time.Second),
		"zero max attempts":      optimistic.WithMaxAttempts(0),
		"negative max attempts":  optimistic.WithMaxAttempts(-1),
		"zero backoff":           optimistic.WithBackoff(0, time.Millisecond),
		"backoff max below base": optimistic.WithBackoff(2*time.Millisecond, time.Millisecond),
	}, func(o optimistic.Option) (any, error) { return optimistic.New(db, o) })
}
