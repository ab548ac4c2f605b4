package sqlstore_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/sqlstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value is ErrInvalidArgument from New (which
// does no I/O: the pool has no database behind it).
func TestOptionsRule(t *testing.T) {
	db := sqlx.NewDb(nil, "mysql")
	optiontest.Run(t, map[string]sqlstore.Option{
		"schema":  sqlstore.WithSchema(sqlstore.Schema{}),
		"key TTL": sqlstore.WithKeyTTL(time.Second),
	}, map[string]sqlstore.Option{
		"zero key TTL":     sqlstore.WithKeyTTL(0),
		"negative key TTL": sqlstore.WithKeyTTL(-time.Second),
	}, func(o sqlstore.Option) (any, error) { return sqlstore.New(db, o) })
}
