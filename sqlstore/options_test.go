package sqlstore_test

import (
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/sqlstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: sqlx.Open does not connect).
func TestOptionsRule(t *testing.T) {
	db, err := sqlx.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	require.NoError(t, err)
	defer db.Close()
	optiontest.Run(t, map[string]sqlstore.Option{
		"schema":  sqlstore.WithSchema(sqlstore.Schema{}),
		"key TTL": sqlstore.WithKeyTTL(time.Second),
	}, map[string]sqlstore.Option{
		"zero key TTL":     sqlstore.WithKeyTTL(0),
		"negative key TTL": sqlstore.WithKeyTTL(-time.Second),
	}, func(o sqlstore.Option) (any, error) { return sqlstore.New(db, o) })
}
