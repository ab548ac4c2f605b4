package zklock

// This file: the Locker and its Lease: a place in the in-process queue
// (lockkit.NewQueuedLocker), then a node in ZooKeeper's line (recipe.go), held until
// Release.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockkit"
)

// locker runs the lock recipe for the callers a lockmgr queue admits
// ([lockkit.NewQueuedLocker]): up to the queue depth of callers of one SKU
// join ZooKeeper's line, in arrival order. A holder that leaves the lock
// directory to the callers behind it marks the SKU (Turn.Share); the last
// of them to leave then deletes the directory if it is empty.
type locker struct {
	conn    *zk.Conn
	cfg     config
	session *session // nil without WithSessionEvents
	busy    busy     // directories last seen with others in line
}

func newLocker(conn *zk.Conn, opts []Option) (lockmgr.Locker, config, error) {
	cfg := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll), acquireTimeout: DefaultAcquireTimeout, depth: DefaultQueueDepth, maxAttempts: lockmgr.DefaultMaxAttempts}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.check(); err != nil {
		return nil, cfg, err
	}
	if conn == nil {
		return nil, cfg, fmt.Errorf("%w: zklock: nil *zk.Conn", inventory.ErrInvalidArgument)
	}
	l := &locker{conn: conn, cfg: cfg}
	q, err := lockkit.NewQueuedLocker(lockkit.QueuedConfig{Name: "zklock", AcquireTimeout: cfg.acquireTimeout,
		Queue: lockkit.QueueConfig{
			Depth:   cfg.depth,
			Cleanup: func(ctx context.Context, name string) { l.removeDir(ctx, l.dir(name)) },
		}}, l.lock)
	if err != nil {
		return nil, cfg, err // before the session watcher: nothing to stop
	}
	if cfg.events != nil {
		l.session = watchSession(cfg.events)
	}
	return q, cfg, nil
}

// dir is the lock directory of name.
func (l *locker) dir(name string) string {
	return l.cfg.root + "/" + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// lock joins the line of name's lock and waits until it comes first, ctx
// is done or the acquire timeout passes; in the last two cases it
// withdraws ([lockkit.TakeFunc]). Every request is bounded by actx; ctx is
// the caller's.
func (l *locker) lock(ctx, actx context.Context, name string, turn *lockkit.Turn[*lease]) (*lease, error) {
	// A connection still in its handshake has no session yet: wait for it,
	// so that the lease belongs to the session that makes the node.
	if err := l.awaitSession(actx); err != nil {
		return nil, l.lockErr(ctx, actx, name, err)
	}
	// Taken before the node exists, so that a session lost at any point
	// from here on marks the lease lost.
	down := l.session.current()
	sid := l.conn.SessionID()

	dir := l.dir(name)
	// dir is probably missing when no other caller of this process is at
	// it, unless it had others of other processes in line at this
	// locker's last turn there.
	node, made, err := l.create(actx, dir, turn.Alone() && !l.busy.has(dir))
	if err != nil {
		return nil, l.lockErr(ctx, actx, name, err)
	}
	// A node made together with dir is first in line: nobody to wait for,
	// and probably nobody behind it (Release finds out if there is).
	next, known := "", true
	if !made {
		next, known, err = l.wait(actx, dir, node, down)
	}
	if err != nil {
		// Withdraw, even though ctx may be done: a node left in line
		// would hold up everyone behind it.
		werr := l.withdraw(ctx, dir, node)
		return nil, l.lockErr(ctx, actx, name, errors.Join(err, werr))
	}
	le := &lease{l: l, turn: turn, dir: dir, node: node, next: next, known: known, down: down, sid: sid}
	l.busy.set(dir, next != "" || !known)
	return le, nil
}

// maxBusy bounds the directories a locker remembers as busy.
const maxBusy = 1024

// busy is the set of lock directories that had other nodes in line when
// this locker last took their lock, and that it has not seen deleted
// since: a hint that the directory still exists, so that the next create
// in it skips the write that makes the directory (which would fail, and
// cost ZooKeeper a logged write). A wrong hint costs one failed write.
type busy struct {
	mu   sync.Mutex
	dirs map[string]struct{}
}

func (b *busy) has(dir string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.dirs[dir]
	return ok
}

func (b *busy) set(dir string, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !on:
		delete(b.dirs, dir)
	case b.dirs == nil || len(b.dirs) >= maxBusy:
		b.dirs = map[string]struct{}{dir: {}} // forget the old hints
	default:
		b.dirs[dir] = struct{}{}
	}
}

// lockErr is the error of a lock that failed with err: the caller's ctx
// error when it is done, ErrContention when the acquire timeout passed.
func (l *locker) lockErr(ctx, actx context.Context, name string, err error) error {
	switch {
	case ctx.Err() != nil:
		err = errors.Join(ctx.Err(), err)
	case actx.Err() != nil:
		err = fmt.Errorf("%w: still waiting in line after %v (%v)", inventory.ErrContention, l.cfg.acquireTimeout, err)
	}
	return fmt.Errorf("zklock: lock %q: %w", name, err)
}

// lease is a held lock: this caller's node is the lowest in its directory.
type lease struct {
	l         *locker
	turn      *lockkit.Turn[*lease] // the caller's place in the in-process queue
	dir, node string
	next      string          // the node after it in line when it came first ("" when none), if known
	known     bool            // whether next is known
	down      <-chan struct{} // closed when the session was (maybe) lost
	sid       int64           // the session that made node
}

// Release deletes the lease's node, which wakes the next in line, and then
// the lock directory if nobody waits (the queue lets the next caller of
// the process in afterwards). It retries over a lost connection until ctx
// is done or CleanupTimeout passes.
//
// The node goes in one write (a multi-op) that first writes released to
// it, which tells the next in line that it comes first (see wait). When
// the lease knows who is after it (it listed the line when it came first),
// that write deletes dir too when nobody is, and otherwise is on condition
// that the node after it is still in line, which leaves dir to that node:
// it deletes dir, or leaves it to its own successor, when it leaves in its
// turn. A lease that came first on its predecessor's release does not know:
// it leaves in the write that marks and deletes node, and then looks at
// dir, deleting it if it is empty. Either way, the next in line is woken by
// that one write, with no listing before it. With others of this process
// behind, node goes alone and dir is left to them. A write that fails as a
// whole (the line changed: someone joined, or the successor left) is
// followed by a delete of node and a look at dir.
func (le *lease) Release(ctx context.Context) error {
	l := le.l
	del := &zk.DeleteRequest{Path: le.node, Version: -1}
	if le.turn.Share() {
		// The next caller of this process reuses dir: the next in line is
		// most likely theirs, right behind node.
		if err := l.delete(ctx, le.node); err != nil {
			return fmt.Errorf("zklock: unlock: %w", err)
		}
		return nil
	}
	mark := &zk.SetDataRequest{Path: le.node, Data: released, Version: -1}
	ops := []any{mark, del}
	switch {
	case le.known && le.next == "":
		ops = []any{del, &zk.DeleteRequest{Path: le.dir, Version: -1}}
	case le.known:
		ops = append(ops, &zk.CheckVersionRequest{Path: le.dir + "/" + le.next, Version: -1})
	}
	_, err := l.conn.Multi(ops...)
	switch {
	case err == nil && !le.known:
		l.removeDir(ctx, le.dir)
	case err != nil:
		err = l.remove(ctx, le.dir, le.node)
	}
	if err != nil {
		return fmt.Errorf("zklock: unlock: %w", err)
	}
	return nil
}
