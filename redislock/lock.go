package redislock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/lockmgr"
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// maxWait bounds a wait for a release message: a safety net should a
// message be lost. Release messages, not this, wake waiters.
const maxWait = 250 * time.Millisecond

var errAcquireTimeout = errors.New("redislock: acquire timeout")

// LockKey returns the Redis key of the lock on sku: PREFIX{tag}:l:SKU, with
// the hash tag of the SKU's stock key, so that a lock and the stock it
// guards share a Redis Cluster slot. Release messages are published on the
// channel of the same name.
func LockKey(prefix, sku string) string {
	stock := rediskeys.Stock(prefix, sku) // PREFIX{tag}:s:SKU
	return strings.TrimSuffix(stock, ":s:"+sku) + ":l:" + sku
}

// locker takes SET-NX locks; it is the [lockmgr.Locker] of a Manager.
type locker struct {
	client         redis.UniversalClient
	prefix         string
	ttl            time.Duration
	acquireTimeout time.Duration
	maxWait        time.Duration // the constant maxWait, unless a test says otherwise

	// queue admits one in-process holder of a name at a time, in arrival
	// order, so only one goroutine per process contends for the Redis lock;
	// a holder that releases while others wait hands them the lock it
	// holds, saving the round trips of a release and a new acquire.
	queue *lockmgr.Queue[*lease]
}

// maxHandoffs bounds how many times in a row a held lock passes straight
// to the next waiter of the same process, so that other processes get
// their turn.
const maxHandoffs = 16

// Acquire implements [lockmgr.Locker].
func (l *locker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redislock: acquire %q: %w", name, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, l.acquireTimeout, errAcquireTimeout)
	defer cancel()
	turn, le, handed, err := l.queue.Enter(ctx, name)
	switch {
	case err != nil:
		return nil, l.waitErr(ctx, name, err)
	case handed:
		le.turn = turn
		return le, nil
	}
	if le, err = l.obtain(ctx, name); err != nil {
		turn.Leave(ctx)
		return nil, err
	}
	le.turn = turn
	le.mu.Lock()
	le.timer = time.AfterFunc(l.ttl/3, le.renew)
	le.mu.Unlock()
	return le, nil
}

// obtain takes the Redis lock on name, waiting for its holder to release it.
func (l *locker) obtain(ctx context.Context, name string) (*lease, error) {
	le := &lease{
		l: l, key: LockKey(l.prefix, name), token: rand.Text(), lost: make(chan struct{}),
	}
	var wake <-chan any
	for {
		start := time.Now()
		pttl, err := acquireScript.Run(ctx, l.client, []string{le.key}, le.token, l.ttl.Milliseconds()).Int64()
		if err != nil {
			// The script may have run before the reply was lost: free the
			// lock, waiting for that only while ctx lives.
			done := make(chan struct{})
			go func() {
				defer close(done)
				fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				_ = le.free(fctx)
			}()
			select {
			case <-done:
			case <-ctx.Done():
			}
			return nil, l.waitErr(ctx, name, err)
		}
		if pttl < 0 {
			le.expires = start.Add(l.ttl)
			return le, nil
		}
		if wake == nil {
			// Subscribe, then try again: the confirmation wakes us, so a
			// release between the last try and the subscription is not
			// missed.
			sub := l.client.Subscribe(ctx, le.key)
			defer sub.Close()
			wake = sub.ChannelWithSubscriptions()
		}
		timer := time.NewTimer(l.wait(pttl))
		select {
		case <-wake:
			for len(wake) > 0 { // one try answers every message so far
				<-wake
			}
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, l.waitErr(ctx, name, nil)
		}
		timer.Stop()
	}
}

// wait is how long to wait for a release message, given the holder's
// remaining TTL (0: none): until the lock would expire, at most l.maxWait,
// jittered so that waiters in several processes spread out.
func (l *locker) wait(pttl int64) time.Duration {
	d := l.maxWait
	if p := time.Duration(pttl) * time.Millisecond; p > 0 && p < d {
		d = p
	}
	return d + mrand.N(d/4+time.Millisecond)
}

// waitErr explains why taking the lock on name failed: the acquire timeout
// (ErrContention), the caller's ctx, or the server error err.
func (l *locker) waitErr(ctx context.Context, name string, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errAcquireTimeout):
		return fmt.Errorf("%w: redislock: %q not locked within %v", inventory.ErrContention, name, l.acquireTimeout)
	case ctx.Err() != nil:
		return fmt.Errorf("redislock: acquire %q: %w", name, ctx.Err())
	}
	return fmt.Errorf("redislock: acquire %q: %w", name, err)
}

// lease is a held lock; it is the [lockmgr.Lease] of a Manager.
type lease struct {
	l          *locker
	key, token string
	turn       *lockmgr.Turn[*lease] // this holder's place in the in-process queue
	lost       chan struct{}         // closed when the lock may be gone

	mu      sync.Mutex  // held while renewing
	timer   *time.Timer // runs renew
	stopped bool        // by Release
	expires time.Time   // when the lock lapses unless renewed
}

// Lost implements [lockmgr.Lease].
func (le *lease) Lost() <-chan struct{} { return le.lost }

// renew extends the lock and schedules itself a third of the TTL later,
// until Release. It closes lost once the lock is someone else's, or may
// lapse before the next try.
func (le *lease) renew() {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.stopped {
		return
	}
	every := le.l.ttl / 3
	ctx, cancel := context.WithTimeout(context.Background(), every)
	start := time.Now()
	ok, err := renewScript.Run(ctx, le.l.client, []string{le.key}, le.token, le.l.ttl.Milliseconds()).Bool()
	cancel()
	switch {
	case err == nil && ok:
		le.expires = start.Add(le.l.ttl)
	case err == nil || time.Until(le.expires) < every:
		close(le.lost)
		return
	}
	le.timer.Reset(every)
}

// Release implements [lockmgr.Lease]. If another goroutine of this
// process waits for the lock, and the lease is neither lost nor handed over
// maxHandoffs times in a row, it passes to that goroutine still held (the
// receiver's Acquire sets turn before anyone else sees the lease).
// Otherwise Release stops renewal, frees the lock if it is still this
// lease's, and lets the next in-process waiter take it anew.
func (le *lease) Release(ctx context.Context) error {
	select {
	case <-le.lost:
	default:
		if le.turn.HandOver(le) {
			return nil
		}
	}
	le.mu.Lock() // waits for a renewal under way
	le.stopped = true
	le.timer.Stop()
	le.mu.Unlock()
	defer le.turn.Leave(ctx)
	return le.free(ctx)
}

// free deletes the lock if it is still this lease's, waking its waiters.
func (le *lease) free(ctx context.Context) error {
	ok, err := releaseScript.Run(ctx, le.l.client, []string{le.key}, le.token).Bool()
	switch {
	case err != nil:
		return fmt.Errorf("redislock: release %s: %w", le.key, err)
	case !ok:
		return fmt.Errorf("redislock: release %s: the lock had lapsed", le.key)
	}
	return nil
}
