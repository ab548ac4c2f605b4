package luascript_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
)

func FuzzManager(f *testing.F) {
	c := testenv.Redis(f)
	prefix := testenv.RedisPrefix(f, c)
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	if err != nil {
		f.Fatal(err)
	}
	inventorytest.Fuzz(f, m)
}
