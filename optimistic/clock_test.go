package optimistic_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/clocktest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/optimistic"
)

// TestHoldClock: holds expire on the database's clock, never the client's
// (clocktest.Run: the database's clock ten days behind, then ahead), on
// MariaDB and PostgreSQL, in both write modes. SQLite's clock is set in
// integration/clock.
func TestHoldClock(t *testing.T) {
	for _, e := range []struct {
		name string
		open func(testing.TB) (*sqlx.DB, func(time.Time) *sqlx.DB)
	}{{"mariadb", clocktest.MySQLAt}, {"postgres", clocktest.PostgresAt}} {
		for _, mode := range []struct {
			name string
			opts []optimistic.Option
		}{{"cas", nil}, {"single", []optimistic.Option{optimistic.WithSingleStatement()}}} {
			t.Run(e.name+"/"+mode.name, func(t *testing.T) {
				clocktest.Run(t, func(t *testing.T) clocktest.At {
					db, at := e.open(t)
					schema := sqltest.Schema(t, db)
					return func(now time.Time) clocktest.Manager {
						m, err := optimistic.New(at(now), append(mode.opts, optimistic.WithSchema(schema))...)
						require.NoError(t, err)
						return m
					}
				})
			})
		}
	}
}
