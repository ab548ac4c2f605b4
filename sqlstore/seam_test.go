package sqlstore_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
)

// TestStoreConformance runs the lockmgrtest Store suite on MariaDB and
// PostgreSQL; SQLite runs belong in sqlite_test.go.
func TestStoreConformance(t *testing.T) {
	for _, engine := range []string{"mariadb", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			db := sqltest.Open(t, engine)
			lockmgrtest.RunStore(t, lockmgrtest.StoreConfig{
				NewStore: func(t *testing.T) lockmgr.Store { return newStore(t, db) },
			})
		})
	}
}
