package rowlock_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/inventorytest"
)

// fuzz compares a Manager on engine with the reference, on tables of its
// own: each fuzzing process starts them empty.
func fuzz(f *testing.F, engine string) {
	db := sqltest.Open(f, engine)
	inventorytest.Fuzz(f, newManager(f, db, sqltest.Schema(f, db)))
}

func FuzzSQLite(f *testing.F) { fuzz(f, "sqlite") }

func FuzzMariaDB(f *testing.F) { fuzz(f, "mariadb") }

func FuzzPostgres(f *testing.F) { fuzz(f, "postgres") }
