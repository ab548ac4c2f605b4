package redislock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
)

// scriptHook counts the calls of one script (by its file in this package)
// and fails the commands named in fail.
type scriptHook struct {
	sha   string
	src   string
	calls *atomic.Int64
	fail  string
}

func newScriptHook(t *testing.T, file string, calls *atomic.Int64) scriptHook {
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	return scriptHook{sha: redis.NewScript(string(src)).Hash(), src: string(src), calls: calls}
}

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		if h.fail != "" && cmd.Name() == h.fail {
			err := errors.New("scriptHook: " + h.fail + " fails")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h scriptHook) count(cmd redis.Cmder) {
	if args := cmd.Args(); len(args) > 1 && strings.HasPrefix(cmd.Name(), "eval") {
		if s, _ := args[1].(string); s == h.sha || s == h.src {
			h.calls.Add(1)
		}
	}
}

// hookedClient is a client of its own on c's server, with h.
func hookedClient(t *testing.T, c *redis.Client, h redis.Hook) *redis.Client {
	hc := redis.NewClient(c.Options())
	t.Cleanup(func() { hc.Close() })
	hc.AddHook(h)
	return hc
}

// requireGone checks that nothing of the lock on sku is left in Redis.
func requireGone(t *testing.T, c redis.UniversalClient, prefix, sku string) {
	t.Helper()
	for _, k := range []string{redislock.LockKey(prefix, sku), redislock.QueueKey(prefix, sku)} {
		n, err := c.Exists(context.Background(), k).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s is gone once the lock is free", k)
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// requireQueued waits until n waiters are in the queue q.
func requireQueued(ctx context.Context, t *testing.T, c redis.UniversalClient, q string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return c.ZCard(ctx, q).Val() == n }, 10*time.Second, time.Millisecond, "%d waiters in %s", n, q)
}

// handOverOpts are the options of Lockers whose locks' TTL is ttl and whose
// safety-net wait is a minute: only a hand-over wakes their waiters within
// a test's deadline.
func handOverOpts(ttl time.Duration) []redislock.Option {
	return []redislock.Option{redislock.WithTTL(ttl), redislock.WithMaxWait(time.Minute)}
}

// TestOneWakeUpPerTurn has many processes (one Locker each) take turns on
// one lock. Each release hands the lock to one waiter, so each turn runs
// the acquire script about once (a Locker that listens already queues
// with its first try), not once per waiter. (Waking every waiter on each
// release ran it about once per waiter per turn: some 15 times here.) The
// safety-net wait and the TTL are a minute, so only hand-overs wake
// waiters within the test's deadline: on a Cluster, a Locker that listened
// on another node than the lock's would be skipped at release (the script
// sees no subscriber there) and wait that minute.
func TestOneWakeUpPerTurn(t *testing.T) {
	for name, open := range map[string]func(t *testing.T, h redis.Hook) (redis.UniversalClient, string){
		"redis": func(t *testing.T, h redis.Hook) (redis.UniversalClient, string) {
			c := testenv.Redis(t)
			return hookedClient(t, c, h), lockPrefix(t, c)
		},
		"cluster": func(t *testing.T, h redis.Hook) (redis.UniversalClient, string) {
			c := testenv.RedisCluster(t)
			hc := redis.NewClusterClient(c.Options())
			t.Cleanup(func() { hc.Close() })
			hc.AddHook(h)
			return hc, lockPrefix(t, c)
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t, 30*time.Second)
			var acquires atomic.Int64
			c, prefix := open(t, newScriptHook(t, "acquire.lua", &acquires))
			const procs, turns, sku = 16, 20, "{hot} shoe"
			var held atomic.Int32
			var wg sync.WaitGroup
			for range procs {
				l := newLocker(t, c, prefix, redislock.WithTTL(time.Minute), redislock.WithMaxWait(time.Minute))
				wg.Go(func() {
					for range turns {
						le, err := l.Acquire(ctx, sku)
						if err != nil {
							t.Error(err)
							return
						}
						if held.Add(1) != 1 {
							t.Error("two holders at once")
						}
						time.Sleep(time.Millisecond)
						held.Add(-1)
						if err := le.Release(ctx); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			perTurn := float64(acquires.Load()) / (procs * turns)
			t.Logf("%d acquire scripts for %d turns of %d processes: %.2f per turn", acquires.Load(), procs*turns, procs, perTurn)
			require.LessOrEqual(t, perTurn, 3.0, "acquire scripts per turn")
			requireGone(t, c, prefix, sku)
		})
	}
}

// TestDeadWaiterSkipped: a queued waiter whose process is gone (nobody
// hears its channel) is skipped at release, and the next waiter has the
// lock at once, though the dead one asked for a minute's TTL.
func TestDeadWaiterSkipped(t *testing.T) {
	c, prefix, ctx := standalone(t)
	const sku = "shoe"
	opts := handOverOpts(time.Minute)
	held := acquire(ctx, t, newLocker(t, c, prefix, opts...), sku)
	q := redislock.QueueKey(prefix, sku)
	require.NoError(t, c.ZAdd(ctx, q, redis.Z{Score: 0, Member: "DEAD 60000 " + prefix + ":w:nobody"}).Err())
	got := acquireAsync(ctx, newLocker(t, c, prefix, opts...), sku)
	requireQueued(ctx, t, c, q, 2)
	require.NoError(t, held.Release(ctx))
	le := <-got
	require.NotNil(t, le, "the live waiter took the lock")
	require.NoError(t, le.Release(ctx))
	requireGone(t, c, prefix, sku)
}

// TestLeavingWaiterDoesNotStall: a waiter gives up (its ctx ends) while
// queued ahead of another, and its attempt to leave the queue fails; the
// lock handed to it is freed by its Locker, which hands it on, so the next
// waiter has it at once (its safety-net wait and the TTLs are a minute).
func TestLeavingWaiterDoesNotStall(t *testing.T) {
	c, prefix, ctx := standalone(t)
	const sku = "shoe"
	opts := handOverOpts(time.Minute)
	holder := newLocker(t, c, prefix, opts...)
	held := acquire(ctx, t, holder, sku)
	other := acquire(ctx, t, holder, "boot")

	var releases atomic.Int64
	h := newScriptHook(t, "release.lua", &releases)
	h.fail = "zrem"
	leaver := newLocker(t, hookedClient(t, c, h), prefix, opts...)
	// The leaver's Locker keeps waiting for another lock meanwhile, so
	// that it still listens when the lock is handed to its gone waiter.
	boot := acquireAsync(ctx, leaver, "boot")
	q := redislock.QueueKey(prefix, sku)
	requireQueued(ctx, t, c, redislock.QueueKey(prefix, "boot"), 1)
	short, cancel := context.WithCancel(ctx)
	gone := acquireAsync(short, leaver, sku)
	requireQueued(ctx, t, c, q, 1)
	got := acquireAsync(ctx, newLocker(t, c, prefix, opts...), sku)
	requireQueued(ctx, t, c, q, 2)
	cancel()
	require.Nil(t, <-gone, "the leaver gave up")

	require.NoError(t, held.Release(ctx))
	le := <-got
	require.NotNil(t, le, "the next waiter took the lock")
	require.Positive(t, releases.Load(), "the leaver's Locker freed the lock handed to its gone waiter")
	require.NoError(t, le.Release(ctx))
	requireGone(t, c, prefix, sku)

	require.NoError(t, other.Release(ctx))
	b := <-boot
	require.NotNil(t, b)
	require.NoError(t, b.Release(ctx))
	requireGone(t, c, prefix, "boot")
}

// TestNoHandOverToAnotherNode: on a Cluster, a queued waiter whose channel
// is listened to on another node than the lock's is skipped, and sent no
// message: a PUBLISH reaches every node's subscribers, so a hand-over
// message the releasing node cannot count would make a second holder.
func TestNoHandOverToAnotherNode(t *testing.T) {
	c := testenv.RedisCluster(t)
	prefix := lockPrefix(t, c)
	ctx := ctxFor(t, 20*time.Second)
	const sku = "shoe"
	key, q := redislock.LockKey(prefix, sku), redislock.QueueKey(prefix, sku)
	master, err := c.MasterForKey(ctx, key)
	require.NoError(t, err)
	var mu sync.Mutex // ForEachMaster runs at once on every master
	var other *redis.Client
	require.NoError(t, c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Options().Addr != master.Options().Addr {
			other = m
		}
		return nil
	}))
	require.NotNil(t, other, "the Cluster has a second master")
	channel := prefix + ":w:elsewhere"
	ps := other.Subscribe(ctx, channel)
	defer ps.Close()
	_, err = ps.Receive(ctx) // the confirmation
	require.NoError(t, err)

	held := acquire(ctx, t, newLocker(t, c, prefix), sku)
	require.NoError(t, c.ZAdd(ctx, q, redis.Z{Score: 0, Member: "ELSEWHERE 60000 " + channel}).Err())
	require.NoError(t, held.Release(ctx))
	// Messages from one node reach another in order: a hand-over sent by
	// the release would arrive before this one.
	require.NoError(t, master.Publish(ctx, channel, "after").Err())
	msg, err := ps.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, "after", msg.Payload, "no hand-over reached a waiter the releasing node could not count")
	requireGone(t, c, prefix, sku)
}

// TestHandedOverLockIsRenewed: a lock handed over to a waiter is renewed
// as one it took itself: with a 60ms TTL (more when a loaded machine
// renewed a lock too late, see requireRenewed) it is held for five TTLs,
// nobody else gets it meanwhile, and Lost stays open.
func TestHandedOverLockIsRenewed(t *testing.T) {
	c, prefix, ctx := standalone(t)
	_, sku := requireRenewed(ctx, t, c, prefix, func(sku string, ttl time.Duration) lockmgr.Lease {
		opts := handOverOpts(ttl)
		held := acquire(ctx, t, newLocker(t, c, prefix, opts...), sku)
		got := acquireAsync(ctx, newLocker(t, c, prefix, opts...), sku)
		q := redislock.QueueKey(prefix, sku)
		require.Eventually(t, func() bool { return closed(held.Lost()) || c.ZCard(ctx, q).Val() == 1 },
			10*time.Second, time.Millisecond, "1 waiter in %s", q)
		if err := held.Release(ctx); err != nil || closed(held.Lost()) {
			// The first lock lapsed before its release (its renewal came
			// late): the waiter takes it without a hand-over.
			if err != nil {
				require.ErrorContains(t, err, "the lock had lapsed")
			}
			if le := <-got; le != nil {
				if err := le.Release(ctx); err != nil { // its 60ms or 240ms may have lapsed too
					require.ErrorContains(t, err, "the lock had lapsed")
				}
			}
			return nil
		}
		le := <-got
		require.NotNil(t, le, "handed over")
		return le
	})
	// The other waiter leaves the queue in the background: the release
	// may hand the lock to it first, and its Locker then frees it.
	q := redislock.QueueKey(prefix, sku)
	require.Eventually(t, func() bool {
		return c.Exists(ctx, redislock.LockKey(prefix, sku), q).Val() == 0
	}, 10*time.Second, time.Millisecond, "lock and queue keys are gone once the lock is free")
}
