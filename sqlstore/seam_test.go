package sqlstore_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
	"github.com/stockkit/inventory/sqlstore"
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

// TestHoldStoreConformance runs the lockmgrtest HoldStore suite on every
// engine, each store on tables of its own (the suite's order ids are not
// kept apart by SKU).
func TestHoldStoreConformance(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		lockmgrtest.RunHoldStore(t, lockmgrtest.HoldStoreConfig{
			NewStore: func(t *testing.T) lockmgr.HoldStore { return newStore(t, db, sqlstore.WithKeyTTL(time.Second)) },
			KeyTTL:   time.Second,
		})
	})
}
