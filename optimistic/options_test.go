package optimistic_test

import (
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/optimistic"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: sqlx.Open does not connect).
func TestOptionsRule(t *testing.T) {
	db, err := sqlx.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	require.NoError(t, err)
	defer db.Close()
	for _, tc := range []struct {
		name string
		opt  optimistic.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"key TTL", optimistic.WithKeyTTL(time.Second), true},
		{"zero key TTL", optimistic.WithKeyTTL(0), false},
		{"negative key TTL", optimistic.WithKeyTTL(-time.Second), false},
		{"max attempts", optimistic.WithMaxAttempts(1), true},
		{"zero max attempts", optimistic.WithMaxAttempts(0), false},
		{"negative max attempts", optimistic.WithMaxAttempts(-1), false},
		{"backoff", optimistic.WithBackoff(time.Millisecond, time.Millisecond), true},
		{"zero backoff", optimistic.WithBackoff(0, time.Millisecond), false},
		{"backoff max below base", optimistic.WithBackoff(2*time.Millisecond, time.Millisecond), false},
		{"single statement", optimistic.WithSingleStatement(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := optimistic.New(db, tc.opt)
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
