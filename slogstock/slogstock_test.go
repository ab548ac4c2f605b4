package slogstock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/fakeorders"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/slogstock"
)

// records decodes the JSON log lines in buf.
func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		out = append(out, r)
	}
	return out
}

func logger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
}

// failing answers Reduce with err.
type failing struct {
	*inventorytest.Memory
	err error
}

func (f failing) Reduce(context.Context, string, int64, ...inventory.Option) (int64, error) {
	return 0, f.err
}

func TestLevels(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	down, err := slogstock.Wrap(failing{inventorytest.NewMemory(0), errors.New("dial tcp: connection refused")},
		slogstock.WithLogger(logger(&buf, slog.LevelInfo)), slogstock.WithStrategy("down"))
	require.NoError(t, err)
	busy, err := slogstock.Wrap(failing{inventorytest.NewMemory(0), fmt.Errorf("lock: %w", inventory.ErrContention)},
		slogstock.WithLogger(logger(&buf, slog.LevelInfo)))
	require.NoError(t, err)
	m, err := slogstock.Wrap(inventorytest.NewMemory(0), slogstock.WithLogger(logger(&buf, slog.LevelInfo)))
	require.NoError(t, err)

	_, err = down.Reduce(ctx, "shoe", 2, inventory.WithKey("buyer-secret"))
	require.Error(t, err)
	_, err = busy.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, inventory.ErrContention)
	require.NoError(t, m.Init(ctx, "shoe", 1))
	_, err = m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err)
	_, err = m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Get(ctx, "nope")
	require.ErrorIs(t, err, inventory.ErrNotFound)

	rs := records(t, &buf)
	require.Len(t, rs, 2, "only the failure and the contention are logged at INFO:\n%s", buf.String())
	assert.Equal(t, "ERROR", rs[0]["level"])
	assert.Equal(t, "reduce", rs[0]["op"])
	assert.Equal(t, "down", rs[0]["strategy"])
	assert.Equal(t, "shoe", rs[0]["sku"])
	assert.EqualValues(t, 2, rs[0]["qty"])
	assert.Equal(t, "buyer-secret", rs[0]["key"], "the key is logged by default")
	assert.NotContains(t, rs[0], "keyed")
	assert.Equal(t, "error", rs[0]["outcome"])
	assert.Contains(t, rs[0]["err"], "connection refused")
	assert.Contains(t, rs[0], "duration")
	assert.Equal(t, "WARN", rs[1]["level"])
	assert.Equal(t, "contention", rs[1]["outcome"])
	assert.Equal(t, "slogstock_test", rs[1]["strategy"], "the strategy defaults to the manager's package")
}

// TestWithoutKeys: where a buyer id is personal data, the key is not
// logged, only that the call had one; an unkeyed call says neither.
func TestWithoutKeys(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	down, err := slogstock.Wrap(failing{inventorytest.NewMemory(0), errors.New("dial tcp: connection refused")},
		slogstock.WithLogger(logger(&buf, slog.LevelInfo)), slogstock.WithoutKeys())
	require.NoError(t, err)
	_, err = down.Reduce(ctx, "shoe", 2, inventory.WithKey("buyer-secret"))
	require.Error(t, err)
	_, err = down.Reduce(ctx, "shoe", 2)
	require.Error(t, err)
	rs := records(t, &buf)
	require.Len(t, rs, 2)
	assert.Equal(t, true, rs[0]["keyed"])
	assert.NotContains(t, rs[0], "key")
	assert.NotContains(t, buf.String(), "buyer-secret", "the key (a buyer id) is not logged")
	assert.NotContains(t, rs[1], "keyed")
	assert.NotContains(t, rs[1], "key")
}

func TestVerdictsAtDebug(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	m, err := slogstock.Wrap(inventorytest.NewMemory(0), slogstock.WithLogger(logger(&buf, slog.LevelDebug)))
	require.NoError(t, err)
	require.NoError(t, m.Init(ctx, "shoe", 1))
	_, err = m.Reduce(ctx, "shoe", 5)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	_, err = m.Reduce(ctx, "shoe", 0)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = m.Reduce(ctx, "shoe", 1)
	require.NoError(t, err)
	rs := records(t, &buf)
	require.Len(t, rs, 2, "ok is never logged:\n%s", buf.String())
	assert.Equal(t, "DEBUG", rs[0]["level"], "sold out is not an error")
	assert.Equal(t, "insufficient", rs[0]["outcome"])
	assert.Equal(t, "DEBUG", rs[1]["level"])
	assert.Equal(t, "invalid", rs[1]["outcome"])
}

func TestOrders(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	// Memory has the order calls; a struct that embeds only its
	// StockManager has not.
	plain, err := slogstock.Wrap(struct{ inventory.StockManager }{inventorytest.NewMemory(0)})
	require.NoError(t, err)
	_, ok := plain.(inventory.OrderManager)
	assert.False(t, ok, "a manager without orders stays without")
	withOrders, err := slogstock.Wrap(inventorytest.NewMemory(0))
	require.NoError(t, err)
	_, ok = withOrders.(inventory.OrderManager)
	assert.True(t, ok, "a manager with orders keeps them")

	m, err := slogstock.Wrap(fakeorders.New(nil), slogstock.WithLogger(logger(&buf, slog.LevelDebug)))
	require.NoError(t, err)
	om, ok := m.(inventory.OrderManager)
	require.True(t, ok, "the wrapper keeps the order calls visible")
	require.NoError(t, m.Init(ctx, "a", 1))
	require.NoError(t, m.Init(ctx, "b", 1))
	err = om.Reserve(ctx, "h", []inventory.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}}, time.Minute)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	require.ErrorIs(t, om.Confirm(ctx, "nope"), inventory.ErrNotFound)
	rs := records(t, &buf)
	require.Len(t, rs, 2, buf.String())
	assert.Equal(t, "reserve", rs[0]["op"])
	assert.Equal(t, []any{"a", "b"}, rs[0]["skus"])
	assert.EqualValues(t, 3, rs[0]["qty"])
	assert.Equal(t, "h", rs[0]["hold"])
	assert.Equal(t, "DEBUG", rs[0]["level"])
	assert.Equal(t, "not_found", rs[1]["outcome"])
}

func TestOptions(t *testing.T) {
	m := inventorytest.NewMemory(0)
	_, err := slogstock.Wrap(m, slogstock.WithLogger(nil))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = slogstock.Wrap(m, slogstock.WithStrategy(""))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = slogstock.Wrap(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = slogstock.Wrap(m, nil)
	require.NoError(t, err, "a nil option is ignored")
}

// Over a real strategy on Redis: a call past its deadline is an error,
// logged with its cause; a cancelled call is logged at INFO; sold out is
// not logged.
func TestLuascriptOnRedis(t *testing.T) {
	c := testenv.Redis(t)
	inner, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	var buf bytes.Buffer
	m, err := slogstock.Wrap(inner, slogstock.WithLogger(logger(&buf, slog.LevelInfo)))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, m.Init(ctx, "sneaker", 1))
	_, err = m.Reduce(ctx, "sneaker", 2)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Reduce(done, "sneaker", 1)
	require.ErrorIs(t, err, context.Canceled)
	late, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = m.Reduce(late, "sneaker", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	rs := records(t, &buf)
	require.Len(t, rs, 2, buf.String())
	assert.Equal(t, "INFO", rs[0]["level"])
	assert.Contains(t, rs[0]["err"], "context canceled")
	assert.Equal(t, "ERROR", rs[1]["level"])
	assert.Equal(t, "luascript", rs[1]["strategy"])
	assert.Contains(t, rs[1]["err"], "deadline exceeded")
}
