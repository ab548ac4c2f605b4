// Package zklock moves stock under a ZooKeeper lock: the lock recipe of
// ephemeral sequential nodes, each waiter watching only its predecessor.
//
// The stock itself lives in a [Store] chosen at construction: a
// *redisstore.Store (Redis) or a *sqlstore.Store (SQL). Each Reduce or
// Return locks its SKU, reads, checks and writes conditionally on what it
// read, then unlocks; so a lock that lapses (the ZooKeeper session expired
// while its holder was paused) ends in a retry or [inventory.ErrContention],
// never in an oversell.
//
// # The recipe
//
// The lock on a SKU is the directory ROOT/ENC, where ENC is the SKU in
// unpadded base64url (any SKU fits one path segment). A caller creates an
// ephemeral sequential node GUID-SEQ in it and lists the directory: the
// lowest sequence number holds the lock; every other waiter watches only
// the node just before its own, so a release wakes one waiter (no herd) and
// nobody polls. Waiters are served in order. A waiter that gives up (its ctx
// is done or the acquire timeout passed) deletes its node.
//
// Directories do not pile up: the last one out deletes the SKU's directory.
// A caller with no other caller of its process at the SKU expects it
// missing and creates it together with its node; a holder that was alone in
// it, with nobody of its process behind, deletes it together with its node:
// each in one write (a ZooKeeper multi-op, which fails as a whole,
// harmlessly, when someone else came in between; the caller then falls back
// to the plain step). Otherwise a holder deletes the directory once it sees
// it empty. An uncontended lock thus costs two writes, like a bare create
// and delete.
//
// Callers of one Manager stand in ZooKeeper's line for a SKU at most
// [DefaultQueueDepth] at a time (see [WithQueueDepth]); the others queue
// inside the process, in arrival order. A crowd of buyers in one process then
// costs ZooKeeper a short line, not thousands of nodes, each listing all the
// others once, while one waiter is always ready to take over in one write.
//
// The GUID in the node name (the "protected" recipe) lets a create whose
// reply was lost with the connection find the node the server did make, so
// it is used or deleted, never left behind to block the SKU. The same goes
// for a release or a withdrawal interrupted by a lost connection: it is
// retried until it is known to be done, for up to [CleanupTimeout] (or until
// the connection is closed, when the Manager reads the session's events).
//
// # Sessions
//
// A lock is as good as the session holding its node. Pass the session's
// event channel with [WithSessionEvents] and every held lease is marked lost
// as soon as the connection drops or the session expires; the call holding it
// then gives up before writing. Without it, a lease is checked for a lost
// connection or a new session only when the call is about to write.
//
// A call on a connection still in its handshake waits for the session,
// within its ctx.
//
// # Deadlines
//
// The requests of the go-zookeeper client take no context; zklock waits for
// each only while the call's ctx lives (and the acquire timeout), so a call
// returns by its deadline even while ZooKeeper hangs. A request given up on
// still ends inside go-zookeeper (answered, or failed when the connection
// drops or is closed); a lock node it made is then deleted in the
// background, and a withdrawal goes on in the background too, for up to
// [CleanupTimeout]. A node that cannot be deleted goes with its session.
// Release, run by the Manager in the background, is bounded by its own
// timeout.
package zklock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
)

// Defaults of the options.
const (
	DefaultRoot           = "/inventory/locks"
	DefaultAcquireTimeout = 10 * time.Second
	DefaultQueueDepth     = 2
)

// CleanupTimeout bounds how long a release or a withdrawal keeps retrying to
// delete its node over a broken connection. Past it the node lives until the
// session ends.
const CleanupTimeout = 10 * time.Second

// Store keeps the stock rows and the idempotency ledger: a
// *redisstore.Store or a *sqlstore.Store.
type Store = lockmgr.Store

// Manager is an [inventory.StockManager] that moves stock under a ZooKeeper
// lock. It is safe for concurrent use.
type Manager struct {
	m *lockmgr.Manager
}

var _ inventory.StockManager = (*Manager)(nil)

// Option configures a Manager.
type Option func(*config)

type config struct {
	root           string
	acl            []zk.ACL
	acquireTimeout time.Duration
	depth          int
	events         <-chan zk.Event
	mgrOpts        []lockmgr.Option
	err            error
}

func (c *config) refuse(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: zklock: "+format, append([]any{inventory.ErrInvalidArgument}, args...)...)
	}
}

// WithRoot sets the path under which the per-SKU lock directories live; it
// is created when missing. It must be an absolute ZooKeeper path other than
// "/", without a trailing slash, empty, "." or ".." segments, control
// characters, or the reserved /zookeeper tree. The default is
// [DefaultRoot], "/inventory/locks".
func WithRoot(root string) Option {
	return func(c *config) {
		if err := validateRoot(root); err != nil {
			c.refuse("root %q: %v", root, err)
		}
		c.root = root
	}
}

func validateRoot(root string) error {
	if !strings.HasPrefix(root, "/") || root == "/" || strings.HasSuffix(root, "/") {
		return errors.New("want an absolute path other than / without a trailing slash")
	}
	if err := inventory.ValidateSKU(root); err != nil {
		return err
	}
	for i, seg := range strings.Split(root[1:], "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return fmt.Errorf("bad segment %q", seg)
		case i == 0 && seg == "zookeeper":
			return errors.New("/zookeeper is reserved")
		}
		for _, r := range seg {
			if r >= '\uf000' && r <= '\uf8ff' || r >= '\ufff0' {
				return fmt.Errorf("segment %q has character %U, which ZooKeeper refuses", seg, r)
			}
		}
	}
	return nil
}

// WithACL sets the ACL of the nodes zklock creates. The default is
// zk.WorldACL(zk.PermAll).
func WithACL(acl ...zk.ACL) Option {
	return func(c *config) {
		if len(acl) == 0 {
			c.refuse("empty ACL")
		}
		c.acl = acl
	}
}

// WithAcquireTimeout bounds how long one call waits in line for its lock
// before it withdraws and gives up with [inventory.ErrContention]. The ctx
// of the call bounds it too. The default is [DefaultAcquireTimeout], 10s.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.refuse("acquire timeout %v is not positive", d)
		}
		c.acquireTimeout = d
	}
}

// WithQueueDepth sets how many callers of the Manager may stand in
// ZooKeeper's line for one SKU at once, the holder included; the others wait
// inside the process, in arrival order, at no cost to ZooKeeper. With 1, each
// hand-over within the process waits for a release and then a new node, two
// writes in a row; 2 keeps a successor ready. The default is
// [DefaultQueueDepth], 2.
func WithQueueDepth(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.refuse("queue depth %d is below 1", n)
		}
		c.depth = n
	}
}

// WithSessionEvents hands the Manager the event channel that zk.Connect
// returned with conn, so that every held lease is marked lost the moment the
// connection drops or the session expires. The Manager reads the channel in
// one goroutine until it is closed (zk closes it when conn is closed); do
// not read it elsewhere, and give it to one Manager only (others on the same
// conn do without). Without this option (the default) a lease is checked
// only before its write: for a connection that is down, or a session that
// is not the one that made its node.
func WithSessionEvents(events <-chan zk.Event) Option {
	return func(c *config) {
		if events == nil {
			c.refuse("nil event channel")
		}
		c.events = events
	}
}

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its conditional write finds that the stock moved (its lock had lapsed),
// before it gives up with [inventory.ErrContention]. The default is
// [lockmgr.DefaultMaxAttempts], 3.
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.refuse("max attempts %d is below 1", n)
		}
		c.mgrOpts = append(c.mgrOpts, lockmgr.WithMaxAttempts(n))
	}
}

// New returns a Manager that locks SKUs with ZooKeeper through conn and
// keeps stock in store. The caller keeps ownership of conn and closes it.
//
// New does no I/O. An invalid argument or option gives an error wrapping
// [inventory.ErrInvalidArgument].
func New(conn *zk.Conn, store Store, opts ...Option) (*Manager, error) {
	l, mgrOpts, err := newLocker(conn, opts)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: zklock: nil store", inventory.ErrInvalidArgument)
	}
	return &Manager{m: lockmgr.New(l, store, mgrOpts...)}, nil
}

// Init sets the stock of sku to qty, creating it if absent. It goes straight
// to the store, without a lock. See [inventory.StockManager].
func (m *Manager) Init(ctx context.Context, sku string, qty int64) error {
	return m.m.Init(ctx, sku, qty)
}

// Get returns the stock of sku, straight from the store. See
// [inventory.StockManager].
func (m *Manager) Get(ctx context.Context, sku string) (int64, error) {
	return m.m.Get(ctx, sku)
}

// Reduce takes qty units of sku under the SKU's lock. See
// [inventory.StockManager].
func (m *Manager) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.m.Reduce(ctx, sku, qty, opts...)
}

// Return gives qty units of sku back under the SKU's lock. See
// [inventory.StockManager].
func (m *Manager) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return m.m.Return(ctx, sku, qty, opts...)
}

// locker runs the lock recipe; it is the [lockmgr.Locker] of a Manager.
type locker struct {
	conn    *zk.Conn
	cfg     config
	session *session // nil without WithSessionEvents

	mu     sync.Mutex
	queues map[string]*queue // per SKU, while callers use it
}

// queue admits up to the queue depth of callers of one SKU into ZooKeeper's
// line; Go serves blocked senders in arrival order.
type queue struct {
	name    string
	slots   chan struct{}
	callers int // admitted or waiting, guarded by locker.mu
	// handedOver is set when a holder left the lock directory to the
	// callers behind it in the process; the last of them to leave then
	// deletes it if it is empty (guarded by locker.mu).
	handedOver bool
}

var _ lockmgr.Locker = (*locker)(nil)

func newLocker(conn *zk.Conn, opts []Option) (*locker, []lockmgr.Option, error) {
	cfg := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll), acquireTimeout: DefaultAcquireTimeout, depth: DefaultQueueDepth}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, nil, cfg.err
	}
	if conn == nil {
		return nil, nil, fmt.Errorf("%w: zklock: nil *zk.Conn", inventory.ErrInvalidArgument)
	}
	l := &locker{conn: conn, cfg: cfg, queues: map[string]*queue{}}
	if cfg.events != nil {
		l.session = watchSession(cfg.events)
	}
	return l, cfg.mgrOpts, nil
}

// dir is the lock directory of name.
func (l *locker) dir(name string) string {
	return l.cfg.root + "/" + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// Acquire waits for a place in ZooKeeper's line among this process's
// callers, joins the line of name's lock and waits until it comes first, ctx
// is done or the acquire timeout passes; in the last two cases it withdraws.
func (l *locker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zklock: lock %q: %w", name, err)
	}
	actx, cancel := context.WithTimeout(ctx, l.cfg.acquireTimeout)
	defer cancel()
	q, err := l.enter(ctx, actx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zklock: lock %q: %w", name, ctx.Err())
		}
		return nil, fmt.Errorf("zklock: lock %q: %w: still queued behind this process's other callers after %v", name, inventory.ErrContention, l.cfg.acquireTimeout)
	}
	le, err := l.lock(ctx, actx, q)
	if err != nil {
		l.leave(ctx, q)
		return nil, err
	}
	return le, nil
}

// enter waits for a place in ZooKeeper's line for name, or until actx is
// done; ctx is the caller's.
func (l *locker) enter(ctx, actx context.Context, name string) (*queue, error) {
	l.mu.Lock()
	q := l.queues[name]
	if q == nil {
		q = &queue{name: name, slots: make(chan struct{}, l.cfg.depth)}
		l.queues[name] = q
	}
	q.callers++
	l.mu.Unlock()
	select {
	case q.slots <- struct{}{}:
		return q, nil
	case <-actx.Done():
		l.exit(ctx, q)
		return nil, actx.Err()
	}
}

// leave gives up a place in ZooKeeper's line.
func (l *locker) leave(ctx context.Context, q *queue) {
	<-q.slots
	l.exit(ctx, q)
}

// exit takes a caller off q. The last caller out deletes the lock directory
// if a holder left it to the callers behind it: they may all have given up
// (in the process's queue, or withdrawing their nodes) without deleting it.
func (l *locker) exit(ctx context.Context, q *queue) {
	l.mu.Lock()
	q.callers--
	last := q.callers == 0 && q.handedOver
	if q.callers == 0 {
		delete(l.queues, q.name)
	}
	l.mu.Unlock()
	if last {
		l.removeDir(ctx, l.dir(q.name))
	}
}

// alone reports whether the caller holding a place in q is the only caller
// of this process that wants q's lock.
func (l *locker) alone(q *queue) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return q.callers == 1
}

// handOver reports whether other callers of this process want q's lock, in
// which case the holder leaves the lock directory to them.
func (l *locker) handOver(q *queue) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q.callers > 1 {
		q.handedOver = true
		return true
	}
	return false
}

// lock joins the line of q's lock, as Acquire. Every request is bounded by
// actx; ctx is the caller's.
func (l *locker) lock(ctx, actx context.Context, q *queue) (*lease, error) {
	// A connection still in its handshake has no session yet: wait for it,
	// so that the lease belongs to the session that makes the node.
	if err := l.awaitSession(actx); err != nil {
		return nil, l.lockErr(ctx, actx, q.name, err)
	}
	// Taken before the node exists, so that a session lost at any point
	// from here on marks the lease lost.
	down := l.session.current()
	sid := l.conn.SessionID()

	dir := l.dir(q.name)
	node, err := l.create(actx, dir, l.alone(q))
	if err != nil {
		return nil, l.lockErr(ctx, actx, q.name, err)
	}
	solo, err := l.wait(actx, dir, node, down)
	if err != nil {
		// Withdraw, even though ctx may be done: a node left in line
		// would hold up everyone behind it.
		werr := l.withdraw(ctx, dir, node)
		return nil, l.lockErr(ctx, actx, q.name, errors.Join(err, werr))
	}
	return &lease{l: l, q: q, dir: dir, node: node, solo: solo, down: down, sid: sid}, nil
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

// do runs op, one or more ZooKeeper requests, and waits for it while ctx
// lives: go-zookeeper's requests take no context. A request given up on
// still ends on its own, as go-zookeeper fails it when the connection drops
// or is closed; op's goroutine then runs abandoned, if not nil, with op's
// error, to undo what op did.
func do(ctx context.Context, op func() error, abandoned func(error)) error {
	if ctx.Done() == nil {
		return op()
	}
	res, quit := make(chan error), make(chan struct{})
	go func() {
		err := op()
		select {
		case res <- err:
		case <-quit:
			if abandoned != nil {
				abandoned(err)
			}
		}
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		close(quit)
		return ctx.Err()
	}
}

// awaitSession returns once conn has a session, waiting within ctx while
// the connection is still in its handshake: go-zookeeper holds a request
// until the session is established.
func (l *locker) awaitSession(ctx context.Context) error {
	for l.conn.State() != zk.StateHasSession || l.conn.SessionID() == 0 {
		err := do(ctx, func() error { _, _, err := l.conn.Exists(l.cfg.root); return err }, nil)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing):
			if l.conn.State() != zk.StateHasSession {
				return fmt.Errorf("no ZooKeeper session: %w", err)
			}
		}
	}
	return nil
}

// create makes this caller's ephemeral sequential node in dir, creating dir
// (and the root) when missing, and returns its path. With fresh, dir is
// probably missing (no other caller of this process is at it), and create
// makes dir and the node in one write. A create given up on when ctx is
// done is undone once its outcome is known.
func (l *locker) create(ctx context.Context, dir string, fresh bool) (string, error) {
	var g [8]byte
	if _, err := rand.Read(g[:]); err != nil {
		return "", err
	}
	guid := hex.EncodeToString(g[:])
	mine := &zk.CreateRequest{Path: dir + "/" + guid + "-", Acl: l.cfg.acl, Flags: zk.FlagEphemeral | zk.FlagSequence}
	for range 10 {
		var node string
		both := fresh
		err := do(ctx, func() error {
			if !both {
				var err error
				node, err = l.conn.Create(mine.Path, nil, mine.Flags, mine.Acl)
				return err
			}
			res, err := l.conn.Multi(&zk.CreateRequest{Path: dir, Acl: l.cfg.acl}, mine)
			if err == nil && len(res) == 2 {
				node = res[1].String
			}
			return err
		}, func(err error) { l.discard(dir, guid, node, err) })
		switch {
		case err == nil && node != "":
			return node, nil
		case ctx.Err() != nil: // given up: discard deletes the node, if any
			return "", err
		case errors.Is(err, zk.ErrNodeExists): // dir is there after all
			fresh = false
			continue
		case errors.Is(err, zk.ErrNoNode) && fresh: // the root is missing
			if err := l.mkdirs(ctx, l.cfg.root); err != nil {
				return "", err
			}
			continue
		case errors.Is(err, zk.ErrNoNode): // dir is gone: its last holder deleted it
			fresh = true
			continue
		case err == nil:
			return "", errors.New("ZooKeeper did not return the created node")
		case definite(err):
			return "", err
		}
		// The reply was lost: the server may have made the node. Find it by
		// its GUID; if it is there, it is ours, in line like any other.
		found, lerr := l.find(ctx, dir, guid)
		switch {
		case found != "":
			return found, nil
		case lerr != nil:
			if ctx.Err() != nil {
				go l.discard(dir, guid, "", err)
			}
			return "", errors.Join(err, lerr)
		}
		return "", err
	}
	return "", fmt.Errorf("%s keeps vanishing", dir)
}

// find returns the node in dir whose name carries guid, or "" when there
// is none; it retries over a lost connection, within ctx.
func (l *locker) find(ctx context.Context, dir, guid string) (string, error) {
	var found string
	err := l.settle(ctx, func() error {
		return do(ctx, func() error {
			children, _, err := l.conn.Children(dir)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			for _, c := range children {
				if strings.HasPrefix(c, guid+"-") {
					found = dir + "/" + c
				}
			}
			return err
		}, nil)
	})
	return found, err
}

// discard undoes a create that was given up on, once its outcome err is
// known: it deletes the node the create made (node, or when the reply was
// lost, the node in dir that carries guid), then dir if it is empty. It runs
// in the background, until it is done, CleanupTimeout passes or the
// connection is closed.
func (l *locker) discard(dir, guid, node string, err error) {
	if node == "" {
		if err == nil || definite(err) {
			return // nothing was made
		}
		var ferr error
		if node, ferr = l.find(context.Background(), dir, guid); node == "" || ferr != nil {
			return // nothing was made, or its session ends it
		}
	}
	_ = l.remove(context.Background(), dir, node)
}

// mkdirs creates p and its missing parents as persistent nodes.
func (l *locker) mkdirs(ctx context.Context, p string) error {
	mk := func() error {
		return do(ctx, func() error { _, err := l.conn.Create(p, nil, 0, l.cfg.acl); return err }, nil)
	}
	err := mk()
	if errors.Is(err, zk.ErrNoNode) {
		if err := l.mkdirs(ctx, path.Dir(p)); err != nil {
			return err
		}
		err = mk()
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// definite reports whether err, from a ZooKeeper request, says for sure
// that the server did not apply the request: an error code from the server,
// or an expired session (whose ephemeral nodes are gone anyway).
func definite(err error) bool {
	for _, e := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrNotEmpty, zk.ErrNoAuth,
		zk.ErrBadVersion, zk.ErrNoChildrenForEphemerals, zk.ErrInvalidACL, zk.ErrBadArguments,
		zk.ErrAPIError, zk.ErrSessionExpired, zk.ErrInvalidPath, zk.ErrInvalidFlags, zk.ErrAuthFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// seq returns the sequence number of a lock node name, GUID-SEQ.
func seq(name string) (int64, bool) {
	_, s, ok := strings.Cut(name, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// wait returns once node is the lowest in dir, or with an error when ctx is
// done, the session was lost or node vanished. solo reports that node was
// then alone in dir.
func (l *locker) wait(ctx context.Context, dir, node string, down <-chan struct{}) (solo bool, err error) {
	me, _ := seq(path.Base(node))
	for {
		var children []string
		err := do(ctx, func() (err error) { children, _, err = l.conn.Children(dir); return err }, nil)
		if err != nil {
			return false, err
		}
		pred, predSeq, mine := "", int64(-1), false
		for _, c := range children {
			s, ok := seq(c)
			switch {
			case !ok:
			case dir+"/"+c == node:
				mine = true
			case s < me && s > predSeq:
				pred, predSeq = c, s
			}
		}
		switch {
		case !mine:
			return false, fmt.Errorf("the lock node vanished (session expired?): %w", zk.ErrNoNode)
		case pred == "":
			return len(children) == 1, nil
		}
		var exists bool
		var ch <-chan zk.Event
		err = do(ctx, func() (err error) { exists, _, ch, err = l.conn.ExistsW(dir + "/" + pred); return err }, nil)
		if err != nil {
			return false, err
		}
		if !exists {
			continue
		}
		select {
		case ev := <-ch:
			if ev.Err != nil {
				return false, ev.Err
			}
		case <-ctx.Done():
			return false, ctx.Err()
		case <-down:
			return false, fmt.Errorf("the ZooKeeper session was lost: %w", zk.ErrConnectionClosed)
		}
	}
}

// withdraw deletes node, then dir if it is empty, as remove, waiting for it
// while ctx lives; past that it goes on in the background, until it is
// done, CleanupTimeout passes or the connection is closed.
func (l *locker) withdraw(ctx context.Context, dir, node string) error {
	return do(ctx, func() error { return l.remove(context.Background(), dir, node) }, nil)
}

// remove deletes node, then dir if it is empty.
func (l *locker) remove(ctx context.Context, dir, node string) error {
	if err := l.delete(ctx, node); err != nil {
		return err
	}
	l.removeDir(ctx, dir)
	return nil
}

// removeDir deletes dir if it is empty, waiting for it while ctx lives.
// Best effort, and only when dir looks empty: a failed delete costs the
// server a logged write like any other. Another caller may be joining
// right now; it then recreates dir.
func (l *locker) removeDir(ctx context.Context, dir string) {
	_ = do(ctx, func() error {
		if ok, st, err := l.conn.Exists(dir); err == nil && ok && st.NumChildren == 0 {
			_ = l.conn.Delete(dir, -1)
		}
		return nil
	}, nil)
}

// delete deletes node, retrying over a lost connection.
func (l *locker) delete(ctx context.Context, node string) error {
	err := l.settle(ctx, func() error {
		err := l.conn.Delete(node, -1)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrSessionExpired) {
			return nil // gone already, or with its session
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", node, err)
	}
	return nil
}

// settle runs op until it succeeds or fails definitely; it retries errors
// after which the outcome is unknown (a lost connection), with a growing
// pause, until ctx is done, CleanupTimeout passes or the connection is
// closed for good.
func (l *locker) settle(ctx context.Context, op func() error) error {
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	pause := 10 * time.Millisecond
	for {
		err := op()
		if err == nil || definite(err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-l.session.gone():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// lease is a held lock: this caller's node is the lowest in its directory.
type lease struct {
	l         *locker
	q         *queue
	dir, node string
	solo      bool            // node was alone in dir when it came first
	down      <-chan struct{} // closed when the session was (maybe) lost
	sid       int64           // the session that made node
}

// closed is a channel that is always closed.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Lost is closed once the session that holds the node may have ended: the
// connection dropped or the session expired (seen by the session watcher),
// or, checked now, the connection is down or a new session replaced it.
func (le *lease) Lost() <-chan struct{} {
	if le.l.conn.State() != zk.StateHasSession || le.l.conn.SessionID() != le.sid {
		return closed
	}
	return le.down
}

// Release deletes the lease's node, which wakes the next in line, and then
// the lock directory if nobody waits. It retries over a lost connection
// until ctx is done or CleanupTimeout passes.
func (le *lease) Release(ctx context.Context) error {
	l := le.l
	defer l.leave(ctx, le.q)
	var err error
	switch {
	case l.handOver(le.q): // the next caller of this process reuses dir
		err = l.delete(ctx, le.node)
	case le.solo:
		// Probably nobody else is in line: delete node and dir in one
		// write, which fails as a whole if someone joined since.
		if _, err = l.conn.Multi(&zk.DeleteRequest{Path: le.node, Version: -1}, &zk.DeleteRequest{Path: le.dir, Version: -1}); err == nil {
			return nil
		}
		fallthrough
	default:
		err = l.remove(ctx, le.dir, le.node)
	}
	if err != nil {
		return fmt.Errorf("zklock: unlock: %w", err)
	}
	return nil
}

// session follows a ZooKeeper session through its event channel.
type session struct {
	mu     sync.Mutex
	down   chan struct{} // closed while the session is down; replaced when it is back
	closed chan struct{} // closed with the event channel: the connection is closed
}

// watchSession starts the goroutine that reads events until the channel
// is closed.
func watchSession(events <-chan zk.Event) *session {
	s := &session{down: make(chan struct{}), closed: make(chan struct{})}
	go func() {
		defer close(s.closed)
		for ev := range events {
			if ev.Type != zk.EventSession {
				continue
			}
			switch ev.State {
			case zk.StateHasSession:
				s.set(true)
			case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
				s.set(false)
			}
		}
		s.set(false) // the connection is closed for good
	}()
	return s
}

func (s *session) set(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.down:
		if up {
			s.down = make(chan struct{})
		}
	default:
		if !up {
			close(s.down)
		}
	}
}

// gone returns a channel that is closed once the connection is closed for
// good. Without a session watcher it returns nil, which never closes.
func (s *session) gone() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.closed
}

// current returns the channel that is closed when the session next goes
// down (already closed while it is down). Without a session watcher it
// returns nil, which never closes.
func (s *session) current() <-chan struct{} {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}
