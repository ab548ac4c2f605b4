package redlock_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
)

// FuzzManager compares redlock over redisstore, call by call, with the
// reference, under fresh key and lock prefixes; the stock keys are deleted
// at the end.
func FuzzManager(f *testing.F) {
	c := testenv.Redis(f)
	s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(f, c)))
	if err != nil {
		f.Fatal(err)
	}
	clients := nodes(f)
	m, err := redlock.New(clients, s, prefix(f, clients))
	if err != nil {
		f.Fatal(err)
	}
	inventorytest.Fuzz(f, m)
}
