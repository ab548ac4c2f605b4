package optimistic_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/optimistic"
)

// fuzz compares a Manager on engine with the reference, on tables of its
// own: each fuzzing process starts them empty.
func fuzz(f *testing.F, engine string, opts ...optimistic.Option) {
	db := sqltest.Open(f, engine)
	inventorytest.Fuzz(f, newManager(f, db, sqltest.Schema(f, db), opts...))
}

func FuzzSQLite(f *testing.F) { fuzz(f, "sqlite") }

func FuzzSQLiteSingleStatement(f *testing.F) { fuzz(f, "sqlite", optimistic.WithSingleStatement()) }

func FuzzMariaDB(f *testing.F) { fuzz(f, "mariadb") }

func FuzzMariaDBSingleStatement(f *testing.F) { fuzz(f, "mariadb", optimistic.WithSingleStatement()) }

func FuzzPostgres(f *testing.F) { fuzz(f, "postgres") }

func FuzzPostgresSingleStatement(f *testing.F) { fuzz(f, "postgres", optimistic.WithSingleStatement()) }
