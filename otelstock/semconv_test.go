package otelstock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/otelstock"
)

// TestErrorType: a failed call's span and duration carry error.type, from
// a short list of words where the sentinel says it and the innermost
// error's type otherwise; an answer (sold out) and a success carry none.
func TestErrorType(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("lock: %w", inventory.ErrContention), "contention"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", &net.DNSError{IsTimeout: true}), "timeout"},
		{fmt.Errorf("x: %w", context.Canceled), "canceled"},
		{fmt.Errorf("luascript: reduce %q: %w", "x", opErr), "*net.OpError"},
		{errors.Join(fmt.Errorf("a: %w", opErr), errors.New("b")), "*net.OpError"},
		{errors.New("something broke"), "_OTHER"},
	} {
		assert.Equal(t, c.want, otelstock.ErrorType(c.err).Value.AsString(), "%v", c.err)
		assert.Equal(t, attribute.Key("error.type"), otelstock.ErrorType(c.err).Key)
	}

	ctx := context.Background()
	p := newProbe(t)
	down := p.wrap(failing{inventorytest.NewMemory(0), fmt.Errorf("redis: %w", opErr)})
	_, err := down.Reduce(ctx, "x", 1)
	require.Error(t, err)
	m := p.wrap(inventorytest.NewMemory(0))
	require.NoError(t, m.Init(ctx, "x", 1))
	_, err = m.Reduce(ctx, "x", 2)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)

	spans := p.spans.Ended()
	require.Len(t, spans, 3)
	set := attribute.NewSet(spans[0].Attributes()...)
	v, ok := set.Value(otelstock.KeyErrorType)
	require.True(t, ok, "a failed call has error.type")
	assert.Equal(t, "*net.OpError", v.AsString())
	for _, s := range spans[1:] {
		set := attribute.NewSet(s.Attributes()...)
		_, ok := set.Value(otelstock.KeyErrorType)
		assert.False(t, ok, "%s: no error.type on a success or an answer", s.Name())
		assert.Equal(t, codes.Unset, s.Status().Code, "%s: status unset", s.Name())
	}
	n, _ := p.durations(outcome("error"), otelstock.KeyErrorType.String("*net.OpError"))
	assert.EqualValues(t, 1, n, "the duration of a failure carries its error.type")
	n, _ = p.durations(outcome("insufficient"))
	assert.EqualValues(t, 1, n)
}

// TestBackendAndScope: db.system.name and server.* on spans and durations
// where the backend is known (luascript's is redis by default), none where
// it is not; the scope is named and versioned.
func TestBackendAndScope(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	inner, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	p := newProbe(t)
	m := p.wrap(inner, otelstock.WithServer("127.0.0.1", 6379))
	require.NoError(t, m.Init(ctx, "x", 1))
	plain := p.wrap(inventorytest.NewMemory(0))
	require.NoError(t, plain.Init(ctx, "y", 1))

	spans := p.spans.Ended()
	require.Len(t, spans, 2)
	set := attribute.NewSet(spans[0].Attributes()...)
	for _, kv := range []attribute.KeyValue{
		otelstock.KeyDBSystem.String("redis"), otelstock.KeyServerAddress.String("127.0.0.1"), otelstock.KeyServerPort.Int(6379),
	} {
		v, ok := set.Value(kv.Key)
		assert.True(t, ok && v == kv.Value, "%s=%v, got %v", kv.Key, kv.Value.String(), v.String())
	}
	set1 := attribute.NewSet(spans[1].Attributes()...)
	_, ok := set1.Value(otelstock.KeyDBSystem)
	assert.False(t, ok, "a manager whose backend is unknown names none")
	n, _ := p.durations(otelstock.KeyDBSystem.String("redis"), otelstock.KeyServerPort.Int(6379))
	assert.EqualValues(t, 1, n)

	scope := spans[0].InstrumentationScope()
	assert.Equal(t, otelstock.ScopeName, scope.Name)
	assert.NotEmpty(t, scope.Version)
	assert.Equal(t, otelstock.Version, scope.Version)
	for _, sm := range p.collect().ScopeMetrics {
		assert.Equal(t, otelstock.Version, sm.Scope.Version, "the meter's scope is versioned too")
	}

	sql := p.wrap(inventorytest.NewMemory(0), otelstock.WithDBSystem("postgresql"), otelstock.WithServer("db.internal", 5432))
	require.NoError(t, sql.Init(ctx, "z", 1))
	set = attribute.NewSet(p.spans.Ended()[2].Attributes()...)
	v, _ := set.Value(otelstock.KeyDBSystem)
	assert.Equal(t, "postgresql", v.AsString())

	for name, o := range map[string]otelstock.Option{
		"empty system": otelstock.WithDBSystem(""),
		"no address":   otelstock.WithServer("", 1),
		"port 0":       otelstock.WithServer("h", 0),
		"port 65536":   otelstock.WithServer("h", 65536),
	} {
		_, err := otelstock.Wrap(inventorytest.NewMemory(0), o)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
}
