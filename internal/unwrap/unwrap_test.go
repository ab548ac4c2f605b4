package unwrap_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/unwrap"
	"github.com/stockkit/inventory/inventorytest"
)

type wrapper struct{ inventory.StockManager }

func (w wrapper) Unwrap() inventory.StockManager { return w.StockManager }

func TestStrategy(t *testing.T) {
	mem := inventorytest.NewMemory(0)
	assert.Equal(t, "inventorytest", unwrap.Strategy(mem))
	assert.Equal(t, "inventorytest", unwrap.Strategy(wrapper{wrapper{mem}}), "through two decorators")
	assert.Same(t, mem, unwrap.Innermost(wrapper{wrapper{mem}}))
	assert.Equal(t, "unknown", unwrap.Strategy(nil))
}

func TestName(t *testing.T) {
	mem := inventorytest.NewMemory(0)
	name, err := unwrap.Name("deco", wrapper{mem}, "", false)
	assert.NoError(t, err)
	assert.Equal(t, "inventorytest", name, "not named: the innermost manager's package")
	name, err = unwrap.Name("deco", mem, "shop", true)
	assert.NoError(t, err)
	assert.Equal(t, "shop", name)
	_, err = unwrap.Name("deco", mem, "", true)
	assert.ErrorIs(t, err, inventory.ErrInvalidArgument)
	assert.ErrorContains(t, err, "deco: empty strategy name")
}
