package sqlstore_test

import (
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/sqlstore"
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
		opt  sqlstore.Option
		ok   bool
	}{
		{"nil", nil, true},
		{"schema", sqlstore.WithSchema(sqlstore.Schema{}), true},
		{"key TTL", sqlstore.WithKeyTTL(time.Second), true},
		{"zero key TTL", sqlstore.WithKeyTTL(0), false},
		{"negative key TTL", sqlstore.WithKeyTTL(-time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sqlstore.New(db, tc.opt)
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
