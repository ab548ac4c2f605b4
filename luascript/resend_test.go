package luascript_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// cutter is a TCP proxy to a Redis that, when armed, forwards the next
// script call (EVAL or EVALSHA) to Redis, lets Redis run it, and then
// breaks the client's connection instead of passing the reply on: the
// case where a client cannot know whether its command ran, and go-redis
// sends it again (MaxRetries).
type cutter struct {
	ln    net.Listener
	to    string
	armed atomic.Int32 // how many script calls to cut
	cut   atomic.Int32 // how many were cut
	stall atomic.Int64 // how long to hold each reply back, in ns
	batch atomic.Int32 // how many of the cut calls were batches
	only  atomic.Bool  // cut batches only
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, to string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutter{ln: ln, to: to}
	var mu sync.Mutex
	var conns []net.Conn
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			var cutNext atomic.Bool
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.up(c, s, &cutNext) }()
			go func() { defer p.wg.Done(); p.down(c, s, &cutNext) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// up forwards client bytes to the server; when armed, it marks the
// connection to be cut at the reply to a script call.
func (p *cutter) up(c, s net.Conn, cutNext *atomic.Bool) {
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			// A batch has 1+3n arguments after its keys: many more array
			// elements than move.lua's 4 or 6.
			var n int
			_, _ = fmt.Sscanf(string(chunk), "*%d\r\n", &n)
			if bytes.Contains(bytes.ToLower(chunk), []byte("\r\neval")) && (n > 7 || !p.only.Load()) {
				if p.armed.Add(-1) >= 0 {
					cutNext.Store(true)
					if n > 7 {
						p.batch.Add(1)
					}
				} else {
					p.armed.Store(0)
				}
			}
			if _, err := s.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down forwards server bytes to the client, until a reply to cut: Redis
// ran the call, and the client never hears of it.
func (p *cutter) down(c, s net.Conn, cutNext *atomic.Bool) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if cutNext.Load() {
				p.cut.Add(1)
				return
			}
			time.Sleep(time.Duration(p.stall.Load()))
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestResentCallAppliesOnce cuts a script call's connection after Redis ran
// it, on a client that resends (MaxRetries 3, the default): the call fails
// (its outcome unknown) and is never applied twice; a keyed retry then
// reports ErrDuplicate. The control shows that go-redis does resend a plain
// script call there, applying it twice.
func TestResentCallAppliesOnce(t *testing.T) {
	ctx := context.Background()
	direct := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, direct)
	p := newCutter(t, direct.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: 3, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	stock := func(sku string) int64 {
		n, err := direct.Get(ctx, rediskeys.Stock(prefix, sku)).Int64()
		require.NoError(t, err)
		return n
	}

	// The control: go-redis resends a script call whose reply it lost.
	require.NoError(t, direct.Set(ctx, rediskeys.Stock(prefix, "control"), 10, 0).Err())
	decr := redis.NewScript(`return redis.call('DECRBY', KEYS[1], 1)`)
	require.NoError(t, decr.Load(ctx, c).Err())
	p.armed.Store(1)
	require.NoError(t, decr.Run(ctx, c, []string{rediskeys.Stock(prefix, "control")}).Err(), "go-redis resent it")
	require.EqualValues(t, 1, p.cut.Load())
	require.EqualValues(t, 8, stock("control"), "the resent copy applied a second time")

	for _, batch := range []int{1, luascript.DefaultMaxBatch} {
		m, err := luascript.New(c, luascript.WithPrefix(prefix), luascript.WithMaxBatch(batch))
		require.NoError(t, err)
		require.NoError(t, m.Init(ctx, "shoe", 10))
		_, err = m.Reduce(ctx, "shoe", 1) // loads the script
		require.NoError(t, err)

		p.cut.Store(0)
		p.armed.Store(1)
		_, err = m.Reduce(ctx, "shoe", 1)
		require.Error(t, err, "batch %d: the reply was lost", batch)
		for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrNotFound, inventory.ErrDuplicate} {
			require.NotErrorIs(t, err, s)
		}
		require.EqualValues(t, 1, p.cut.Load())
		require.EqualValues(t, 8, stock("shoe"), "batch %d: applied once, never resent", batch)

		p.armed.Store(1)
		key := inventory.WithKey(fmt.Sprint("buyer-", batch))
		_, err = m.Reduce(ctx, "shoe", 2, key)
		require.Error(t, err)
		require.EqualValues(t, 6, stock("shoe"))
		left, err := m.Reduce(ctx, "shoe", 2, key)
		require.ErrorIs(t, err, inventory.ErrDuplicate, "the keyed retry finds the call that ran")
		require.EqualValues(t, 6, left)
		require.EqualValues(t, 6, stock("shoe"))
	}
}

// TestResentBatchAppliesOnce cuts the connection of merged calls after Redis
// ran them, on a client that resends. Unkeyed: no call is applied twice
// (the stock taken is at least the successes and at most the successes
// plus the failed calls, whose outcome is unknown), which a resent batch
// answered as new would break. Keyed: retries with the same keys make
// every call take effect exactly once.
func TestResentBatchAppliesOnce(t *testing.T) {
	ctx := context.Background()
	direct := testenv.Redis(t)
	prefix := testenv.RedisPrefix(t, direct)
	p := newCutter(t, direct.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: 3, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	m, err := luascript.New(c, luascript.WithPrefix(prefix))
	require.NoError(t, err)
	const buyers, rounds = 32, 20
	sale := func(keyed bool) (ok, failed int64) {
		var oks, fails atomic.Int64
		for r := range rounds {
			p.armed.Store(3) // cut the first script calls of the round
			var wg sync.WaitGroup
			for b := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var opts []inventory.Option
					if keyed {
						opts = append(opts, inventory.WithKey(fmt.Sprint(r, "-", b)))
					}
					_, err := m.Reduce(ctx, "shoe", 1, opts...)
					for err != nil && keyed && !errors.Is(err, inventory.ErrDuplicate) {
						fails.Add(1)
						_, err = m.Reduce(ctx, "shoe", 1, opts...)
					}
					switch {
					case err == nil:
						oks.Add(1)
					case errors.Is(err, inventory.ErrInsufficientStock):
						t.Errorf("the stock ran out: %v", err)
					case !keyed:
						fails.Add(1)
					}
				}()
			}
			wg.Wait()
		}
		return oks.Load(), fails.Load()
	}

	const stock = 10 * buyers * rounds // never runs out, even if calls applied twice
	require.NoError(t, m.Init(ctx, "shoe", stock))
	p.only.Store(true) // a resent batch answered as new would sell its calls twice
	ok, failed := sale(false)
	p.only.Store(false)
	left, err := m.Get(ctx, "shoe")
	require.NoError(t, err)
	taken := stock - left
	require.LessOrEqual(t, taken, ok+failed, "no call applied twice")
	require.GreaterOrEqual(t, taken, ok)
	require.Positive(t, failed, "some calls were cut")
	require.Positive(t, p.batch.Load(), "batches were cut")

	p.batch.Store(0)
	require.NoError(t, m.Init(ctx, "shoe", buyers*rounds))
	_, failed = sale(true)
	require.Positive(t, failed, "some calls were cut")
	require.Positive(t, p.batch.Load(), "batches were cut")
	left, err = m.Get(ctx, "shoe")
	require.NoError(t, err)
	require.Zero(t, left, "every call took effect once: none twice, none lost")
}
