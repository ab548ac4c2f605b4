package redislock

import (
	"context"
	"crypto/rand"
	_ "embed"
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

// LockKey returns the Redis key of the lock on sku: PREFIX{tag}:l:SKU, with
// the hash tag of the SKU's stock key, so that a lock and the stock it
// guards share a Redis Cluster slot. Release messages are published on the
// channel of the same name.
func LockKey(prefix, sku string) string {
	stock := rediskeys.Stock(prefix, sku) // PREFIX{tag}:s:SKU
	return strings.TrimSuffix(stock, ":s:"+sku) + ":l:" + sku
}

// locker takes SET-NX locks for the head of a lockmgr queue; the queue
// admits one in-process holder of a name at a time, in arrival order, so
// only one goroutine per process contends for the Redis lock, and a holder
// that releases while others wait hands them the lock it holds, saving the
// round trips of a release and a new acquire ([lockmgr.NewQueuedLocker]).
type locker struct {
	client         redis.UniversalClient
	prefix         string
	ttl            time.Duration
	acquireTimeout time.Duration
	maxWait        time.Duration // the constant maxWait, unless a test says otherwise
}

// maxHandoffs bounds how many times in a row a held lock passes straight
// to the next waiter of the same process, so that other processes get
// their turn.
const maxHandoffs = 16

// take implements [lockmgr.TakeFunc]: it takes the Redis lock and starts
// its renewal.
func (l *locker) take(ctx, actx context.Context, name string, _ *lockmgr.Turn[*lease]) (*lease, error) {
	le, err := l.obtain(ctx, actx, name)
	if err != nil {
		return nil, err
	}
	le.mu.Lock()
	le.timer = time.AfterFunc(l.ttl/3, le.renew)
	le.mu.Unlock()
	return le, nil
}

// obtain takes the Redis lock on name, waiting for its holder to release it.
// actx is ctx bounded by the acquire timeout.
func (l *locker) obtain(ctx, actx context.Context, name string) (*lease, error) {
	le := &lease{
		l: l, key: LockKey(l.prefix, name), token: rand.Text(), lost: make(chan struct{}),
	}
	var wake <-chan any
	for {
		start := time.Now()
		pttl, err := acquireScript.Run(actx, l.client, []string{le.key}, le.token, l.ttl.Milliseconds()).Int64()
		if err != nil {
			// The script may have run before the reply was lost: free the
			// lock, waiting for that only while ctx lives.
			done := make(chan struct{})
			go func() {
				defer close(done)
				fctx, cancel := context.WithTimeout(context.WithoutCancel(actx), time.Second)
				defer cancel()
				_ = le.free(fctx)
			}()
			select {
			case <-done:
			case <-actx.Done():
			}
			return nil, l.waitErr(ctx, actx, name, err)
		}
		if pttl < 0 {
			le.expires = start.Add(l.ttl)
			return le, nil
		}
		if wake == nil {
			// Subscribe, then try again: the confirmation wakes us, so a
			// release between the last try and the subscription is not
			// missed.
			sub := l.client.Subscribe(actx, le.key)
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
		case <-actx.Done():
			timer.Stop()
			return nil, l.waitErr(ctx, actx, name, nil)
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

// waitErr explains why taking the lock on name failed: the caller's ctx,
// the acquire timeout that bounds actx (ErrContention), or the server error
// err.
func (l *locker) waitErr(ctx, actx context.Context, name string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("redislock: acquire %q: %w", name, ctx.Err())
	case actx.Err() != nil:
		return fmt.Errorf("%w: redislock: %q not locked within %v", inventory.ErrContention, name, l.acquireTimeout)
	}
	return fmt.Errorf("redislock: acquire %q: %w", name, err)
}

// lease is a held lock; it is the [lockmgr.Lease] of a Manager.
type lease struct {
	l          *locker
	key, token string
	lost       chan struct{} // closed when the lock may be gone

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

// Release implements [lockmgr.Lease]: it stops renewal and frees the lock
// if it is still this lease's. (While another goroutine of this process
// waits for the lock, the queue hands it the lease, still held, instead.)
func (le *lease) Release(ctx context.Context) error {
	le.mu.Lock() // waits for a renewal under way
	le.stopped = true
	le.timer.Stop()
	le.mu.Unlock()
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
