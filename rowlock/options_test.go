package rowlock_test

import (
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/rowlock"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: sqlx.Open does not connect).
func TestOptionsRule(t *testing.T) {
	db, err := sqlx.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	require.NoError(t, err)
	defer db.Close()
	optiontest.Run(t, map[string]rowlock.Option{
		"key TTL":      rowlock.WithKeyTTL(time.Second),
		"lock timeout": rowlock.WithLockTimeout(time.Second),
	}, map[string]rowlock.Option{
		"zero key TTL":          rowlock.WithKeyTTL(0),
		"negative key TTL":      rowlock.WithKeyTTL(-time.Second),
		"zero lock timeout":     rowlock.WithLockTimeout(0),
		"negative lock timeout": rowlock.WithLockTimeout(-time.Second),
	}, func(o rowlock.Option) (any, error) { return rowlock.New(db, o) })
}
