package rowlock_test

import (
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/rowlock"
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
		opt  rowlock.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"key TTL", rowlock.WithKeyTTL(time.Second), true},
		{"zero key TTL", rowlock.WithKeyTTL(0), false},
		{"negative key TTL", rowlock.WithKeyTTL(-time.Second), false},
		{"lock timeout", rowlock.WithLockTimeout(time.Second), true},
		{"zero lock timeout", rowlock.WithLockTimeout(0), false},
		{"negative lock timeout", rowlock.WithLockTimeout(-time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := rowlock.New(db, tc.opt)
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
