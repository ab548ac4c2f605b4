package redlock_test

import (
	"context"
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
	pfx := testenv.Prefix()
	f.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, pfx+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	s, err := redisstore.New(c, redisstore.WithPrefix(pfx))
	if err != nil {
		f.Fatal(err)
	}
	m, err := redlock.New(nodes(f), s, redlock.WithPrefix(pfx+":"))
	if err != nil {
		f.Fatal(err)
	}
	inventorytest.Fuzz(f, m)
}
