package redislock_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redislock"
)

// FuzzRedis compares redislock over redisstore, call by call, with the
// reference, under a fresh prefix whose keys are deleted at the end.
func FuzzRedis(f *testing.F) {
	c := testenv.Redis(f)
	m, err := redislock.New(c, storetest.Redis(f, c), redislock.WithPrefix(lockPrefix(f, c)))
	if err != nil {
		f.Fatal(err)
	}
	inventorytest.Fuzz(f, m)
}

// FuzzSQLite compares redislock over sqlstore on a fresh SQLite database,
// call by call, with the reference.
func FuzzSQLite(f *testing.F) {
	c := testenv.Redis(f)
	db := testenv.SQLite(f)
	s := storetest.SQL(f, db)
	m, err := redislock.New(c, s, redislock.WithPrefix(lockPrefix(f, c)))
	if err != nil {
		f.Fatal(err)
	}
	inventorytest.Fuzz(f, m)
}
