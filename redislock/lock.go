package redislock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/lockmgr/lockkit"
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

// maxWait bounds a wait for a hand-over: a safety net should a message be
// lost, or a lock lapse while others queue for it. Hand-overs, not this,
// wake waiters.
const maxWait = 250 * time.Millisecond

// linger is how long a Locker keeps its subscription after its last waiter
// (or the holder of a lock it waited for) is done, so that a busy lock does
// not cost a connection per wait.
const linger = 200 * time.Millisecond

// LockKey returns the Redis key of the lock on sku: PREFIX{tag}:lk:SKU,
// with the hash tag of the SKU's stock key, so that a lock and the stock it
// guards share a Redis Cluster slot. (It was PREFIX{tag}:l:SKU, the key of
// the SKU's ledger stream under the same prefix: see
// redisstore.WithLedger.)
func LockKey(prefix, sku string) string { return tagged(prefix, sku, "lk") }

// queueKey returns the key of the queue of the processes waiting for the
// lock on sku: PREFIX{tag}:q:SKU, in the lock's slot.
func queueKey(prefix, sku string) string { return tagged(prefix, sku, "q") }

// tagged returns PREFIX{tag}:KIND:SKU, with the hash tag of the SKU's stock
// key (PREFIX{tag}:s:SKU).
func tagged(prefix, sku, kind string) string {
	stock := rediskeys.Stock(prefix, sku)
	return strings.TrimSuffix(stock, ":s:"+sku) + ":" + kind + ":" + sku
}

// locker takes SET-NX locks for the head of a lockmgr queue; the queue
// admits one in-process holder of a name at a time, in arrival order, so
// only one goroutine per process contends for the Redis lock, and a holder
// that releases while others wait hands them the lock it holds, saving the
// round trips of a release and a new acquire ([lockkit.NewQueuedLocker]).
//
// Across processes, a caller that finds the lock held joins the lock's
// queue in Redis, under a member naming its token and its Locker's
// channel, and release.lua hands the lock to the head of the queue: one
// wake-up per release, not one per waiter.
type locker struct {
	client         redis.UniversalClient
	prefix         string
	ttl            time.Duration
	acquireTimeout time.Duration
	maxWait        time.Duration // the constant maxWait, unless a test says otherwise
	id             string        // names the Locker's channels

	mu      sync.Mutex
	subs    map[string]*subscription // by node address ("" unless a Cluster)
	waiters map[string]*waiter       // by token
}

// waiter is a caller queued in Redis, from its first queued try until it
// leaves or releases the lock it took.
type waiter struct {
	sub    *subscription
	handed chan struct{} // closed when a hand-over arrives
	done   bool          // handed is closed
}

// subscription is a Locker's channel on one Redis node, with the goroutine
// that reads its hand-overs. It lives while waiters use it, and linger
// after.
type subscription struct {
	channel string
	ps      *redis.PubSub
	ready   chan struct{} // closed once SUBSCRIBE is confirmed
	users   int           // guarded by locker.mu
	idle    *time.Timer   // closes it once unused for linger
}

// maxHandoffs bounds how many times in a row a held lock passes straight
// to the next waiter of the same process, so that other processes get
// their turn.
const maxHandoffs = 16

// take implements [lockkit.TakeFunc]: it takes the Redis lock and starts
// its renewal.
func (l *locker) take(ctx, actx context.Context, name string, _ *lockkit.Turn[*lease]) (*lease, error) {
	le, err := l.obtain(ctx, actx, name)
	if err != nil {
		return nil, err
	}
	le.mu.Lock()
	le.timer = time.AfterFunc(l.ttl/3, le.renew)
	le.mu.Unlock()
	return le, nil
}

// obtain takes the Redis lock on name, waiting for its holder to hand it
// over. actx is ctx bounded by the acquire timeout.
func (l *locker) obtain(ctx, actx context.Context, name string) (*lease, error) {
	le := &lease{
		l: l, key: LockKey(l.prefix, name), queue: queueKey(l.prefix, name), token: rand.Text(),
		lost: make(chan struct{}),
	}
	client, node, err := l.node(actx, le.key)
	if err != nil {
		return nil, l.waitErr(ctx, actx, name, err)
	}
	if !l.listening(node) {
		// Try first, and listen only if the lock is held.
		start := time.Now()
		pttl, err := acquireScript.Run(actx, l.client, []string{le.key}, le.token, l.ttl.Milliseconds()).Int64()
		if err != nil {
			return nil, l.failed(ctx, actx, name, le, err)
		}
		if pttl < 0 {
			le.expires = start.Add(l.ttl)
			return le, nil
		}
	}
	// Listen on this Locker's channel, then join the queue unless the lock
	// is free.
	w, err := l.enter(actx, le, client, node)
	if err != nil {
		return nil, l.waitErr(ctx, actx, name, err)
	}
	member := le.token + " " + strconv.FormatInt(l.ttl.Milliseconds(), 10) + " " + w.sub.channel
	life := 4 * l.maxWait.Milliseconds()
	for {
		// A hand-over can only follow a try that found the lock held, so
		// the lock lives at least a TTL past the start of the last try.
		start := time.Now()
		pttl, err := acquireScript.Run(actx, l.client, []string{le.key, le.queue}, le.token, l.ttl.Milliseconds(), member, life).Int64()
		if err != nil {
			l.leave(le, member)
			return nil, l.failed(ctx, actx, name, le, err)
		}
		if pttl < 0 {
			le.expires = start.Add(l.ttl)
			return le, nil
		}
		timer := time.NewTimer(l.wait(pttl))
		select {
		case <-w.handed:
			timer.Stop()
			le.expires = start.Add(l.ttl)
			return le, nil
		case <-timer.C:
		case <-actx.Done():
			timer.Stop()
			l.leave(le, member)
			return nil, l.waitErr(ctx, actx, name, nil)
		}
	}
}

// failed frees the lock after a try that failed with err (the script may
// have run before its reply was lost), waiting for that only while actx
// lives, and says why.
func (l *locker) failed(ctx, actx context.Context, name string, le *lease, err error) error {
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
	return l.waitErr(ctx, actx, name, err)
}

// node returns the client on which to listen for hand-overs of the lock
// key, and the address of its node ("" unless a Cluster). A PUBLISH counts
// the subscribers of its own node only, so on a Cluster a Locker listens
// on the node that runs the lock's scripts.
func (l *locker) node(ctx context.Context, key string) (redis.UniversalClient, string, error) {
	c, ok := l.client.(interface {
		MasterForKey(context.Context, string) (*redis.Client, error)
	})
	if !ok {
		return l.client, "", nil
	}
	m, err := c.MasterForKey(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return m, m.Options().Addr, nil
}

// listening reports whether this Locker listens on node already: then
// a caller joins the queue with its first try.
func (l *locker) listening(node string) bool {
	l.mu.Lock()
	s := l.subs[node]
	l.mu.Unlock()
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// enter registers le's token as a waiter and returns it once this Locker's
// channel on node (of client) is subscribed, so that a hand-over published
// after the caller joins the queue reaches it.
func (l *locker) enter(actx context.Context, le *lease, client redis.UniversalClient, node string) (*waiter, error) {
	l.mu.Lock()
	s := l.subs[node]
	if s == nil {
		s = &subscription{channel: l.prefix + ":w:" + l.id + ":" + node, ready: make(chan struct{})}
		s.ps = client.Subscribe(context.WithoutCancel(actx)) // no I/O yet
		go l.dispatch(s)
		if l.subs == nil {
			l.subs, l.waiters = map[string]*subscription{}, map[string]*waiter{}
		}
		l.subs[node] = s
	}
	s.users++
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	w := &waiter{sub: s, handed: make(chan struct{})}
	l.waiters[le.token] = w
	le.w = w
	l.mu.Unlock()
	select {
	case <-s.ready:
		return w, nil
	case <-actx.Done():
		l.done(le)
		return nil, actx.Err()
	}
}

// dispatch reads the hand-overs of s until it is closed: it wakes the
// waiter a hand-over names, or, when that waiter has left, frees the lock
// it was handed (in the background, at most a second), which hands it on.
func (l *locker) dispatch(s *subscription) {
	// Should this fail, the PubSub subscribes again as it reconnects.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.ps.Subscribe(ctx, s.channel)
	cancel()
	confirmed := false
	for msg := range s.ps.ChannelWithSubscriptions() {
		switch m := msg.(type) {
		case *redis.Subscription:
			if !confirmed && m.Kind == "subscribe" {
				confirmed = true
				close(s.ready)
			}
		case *redis.Message:
			token, keys, _ := strings.Cut(m.Payload, " ")
			key, queue, ok := strings.Cut(keys, "\n")
			if !ok {
				continue
			}
			l.mu.Lock()
			w := l.waiters[token]
			if w != nil && !w.done {
				w.done = true
				close(w.handed)
			}
			l.mu.Unlock()
			if w == nil { // in the background, not to hold up the hand-overs behind it
				go func() {
					orphan := &lease{l: l, key: key, queue: queue, token: token}
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					_ = orphan.free(ctx)
				}()
			}
		}
	}
}

// leave takes a waiter that gives up out of the queue, in the background
// (at most a second): a hand-over that arrived already is freed, which
// hands it on, as the dispatcher frees one that arrives later.
func (l *locker) leave(le *lease, member string) {
	handed := l.done(le)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if handed {
			_ = le.free(ctx)
			return
		}
		_ = l.client.ZRem(ctx, le.queue, member).Err()
	}()
}

// done forgets le's waiter, if it has one, and lets its subscription go
// once unused for linger. It reports whether a hand-over had arrived.
func (l *locker) done(le *lease) (handed bool) {
	w := le.w
	if w == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiters[le.token] != w {
		return false
	}
	delete(l.waiters, le.token)
	s := w.sub
	if s.users--; s.users == 0 {
		var idle *time.Timer
		idle = time.AfterFunc(linger, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if s.idle != idle { // used since
				return
			}
			for node, v := range l.subs {
				if v == s {
					delete(l.subs, node)
				}
			}
			_ = s.ps.Close()
		})
		s.idle = idle
	}
	return w.done
}

// wait is how long to wait for a hand-over, given the holder's
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

// lease is a held lock; it is the [github.com/stockkit/inventory/lockmgr.Lease] of a Manager.
type lease struct {
	l                 *locker
	key, queue, token string
	w                 *waiter       // if it queued for the lock
	lost              chan struct{} // closed when the lock may be gone

	mu      sync.Mutex  // held while renewing
	timer   *time.Timer // runs renew
	stopped bool        // by Release
	expires time.Time   // when the lock lapses unless renewed
}

// Lost implements [github.com/stockkit/inventory/lockmgr.Lease].
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

// Release implements [github.com/stockkit/inventory/lockmgr.Lease]: it stops renewal and frees the lock
// if it is still this lease's. (While another goroutine of this process
// waits for the lock, the queue hands it the lease, still held, instead.)
func (le *lease) Release(ctx context.Context) error {
	le.mu.Lock() // waits for a renewal under way
	le.stopped = true
	le.timer.Stop()
	le.mu.Unlock()
	defer le.l.done(le)
	return le.free(ctx)
}

// free hands the lock over to the next waiter in the queue, or deletes it,
// if it is still this lease's.
func (le *lease) free(ctx context.Context) error {
	ok, err := releaseScript.Run(ctx, le.l.client, []string{le.key, le.queue}, le.token).Bool()
	switch {
	case err != nil:
		return fmt.Errorf("redislock: release %s: %w", le.key, err)
	case !ok:
		return fmt.Errorf("redislock: release %s: the lock had lapsed", le.key)
	}
	return nil
}
