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
// is done or the acquire timeout passed) deletes its node. A holder marks
// its node released in the write that deletes it, so that the waiter
// behind it takes the lock on that event alone; a node that went otherwise
// (withdrawn, or with its session) makes the waiter list the line again.
//
// Directories do not pile up: the last one out deletes the SKU's directory.
// A caller with no other caller of its process at the SKU expects it
// missing, unless the Locker's last turn there had others in line, and
// creates it together with its node, which is then first in line without a
// listing; a holder that was alone in it, with nobody of its process
// behind, deletes it together with its node: each in one write (a
// ZooKeeper multi-op, which fails as a whole, harmlessly, when someone else
// came in between; the caller then falls back to the plain step). A holder
// that saw a successor in line when it came first deletes its node on
// condition that the successor is still there (one multi-op again), and so
// leaves the directory to it. A holder that came first on its
// predecessor's release has not listed the line since it joined: it leaves
// in the write that marks and deletes its node, and only then looks at the
// directory, deleting it if it is empty; so the next in line takes over
// one write after the holder is done, with no read in between. An
// uncontended lock thus costs two writes and no read, where a bare create,
// listing and delete cost three requests; a turn in a line of other
// processes' callers costs as many requests as go-zookeeper's zk.Lock: a
// create, a listing and a watch to join, one write to leave and a look at
// the directory after it (where zk.Lock's holder lists the line again
// before it comes first).
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
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
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
// lock. It is safe for concurrent use. It is the generic [lockmgr.Manager]
// over this package's lock.
type Manager = lockmgr.Manager

// Option configures a Manager or a Locker. Options follow the rule of the
// root package (see [inventory] "Options"): a nil Option is ignored, and an
// out-of-range value makes [New] and [NewLocker] fail with an error
// wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

type config struct {
	root           string
	acl            []zk.ACL
	acquireTimeout time.Duration
	depth          int
	events         <-chan zk.Event
	eventsSet      bool // WithSessionEvents was given
	maxAttempts    int
}

// check returns the error of the first option out of range; the acquire
// timeout is lockkit.NewQueuedLocker's to check.
func (c *config) check() error {
	var bad string
	switch err := validateRoot(c.root); {
	case err != nil:
		bad = fmt.Sprintf("root %q: %v", c.root, err)
	case len(c.acl) == 0:
		bad = "empty ACL"
	case c.depth < 1:
		bad = fmt.Sprintf("queue depth %d is below 1", c.depth)
	case c.eventsSet && c.events == nil:
		bad = "nil event channel"
	case c.maxAttempts < 1:
		bad = fmt.Sprintf("max attempts %d is below 1", c.maxAttempts)
	default:
		return nil
	}
	return fmt.Errorf("%w: zklock: %s", inventory.ErrInvalidArgument, bad)
}

// WithRoot sets the path under which the per-SKU lock directories live; it
// is created when missing. It must be an absolute ZooKeeper path other than
// "/", without a trailing slash, empty, "." or ".." segments, control
// characters, or the reserved /zookeeper tree. The default is
// [DefaultRoot], "/inventory/locks".
func WithRoot(root string) Option {
	return func(c *config) { c.root = root }
}

func validateRoot(root string) error {
	if !strings.HasPrefix(root, "/") || root == "/" || strings.HasSuffix(root, "/") {
		return errors.New("want an absolute path other than / without a trailing slash")
	}
	if err := driver.ValidateSKU(root); err != nil {
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
	return func(c *config) { c.acl = acl }
}

// WithAcquireTimeout bounds how long one call waits in line for its lock
// before it withdraws and gives up with [inventory.ErrContention]. The ctx
// of the call bounds it too. The default is [DefaultAcquireTimeout], 10s.
func WithAcquireTimeout(d time.Duration) Option {
	return func(c *config) { c.acquireTimeout = d }
}

// WithQueueDepth sets how many callers of the Manager may stand in
// ZooKeeper's line for one SKU at once, the holder included; the others wait
// inside the process, in arrival order, at no cost to ZooKeeper. With 1, each
// hand-over within the process waits for a release and then a new node, two
// writes in a row; 2 keeps a successor ready. The default is
// [DefaultQueueDepth], 2.
func WithQueueDepth(n int) Option {
	return func(c *config) { c.depth = n }
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
	return func(c *config) { c.events, c.eventsSet = events, true }
}

// WithMaxAttempts sets how many times one call locks, reads and writes when
// its conditional write finds that the stock moved (its lock had lapsed),
// before it gives up with [inventory.ErrContention]. It must be at least 1.
// The default is [lockmgr.DefaultMaxAttempts], 3. A Locker ignores it.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = n }
}

// New returns a Manager that locks SKUs with ZooKeeper through conn and
// keeps stock in store. The caller keeps ownership of conn and closes it.
//
// New does no I/O. An invalid argument or option gives an error wrapping
// [inventory.ErrInvalidArgument].
func New(conn *zk.Conn, store Store, opts ...Option) (*Manager, error) {
	l, cfg, err := newLocker(conn, opts)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: zklock: nil store", inventory.ErrInvalidArgument)
	}
	return lockmgr.NewManager(l, store, lockmgr.WithName("zklock"), lockmgr.WithMaxAttempts(cfg.maxAttempts))
}

// NewLocker returns the lock a Manager with these arguments uses, to use on
// its own: the ZooKeeper lock recipe per name, with in-process queueing, as
// the package documentation describes. It does no I/O.
func NewLocker(conn *zk.Conn, opts ...Option) (lockmgr.Locker, error) {
	l, _, err := newLocker(conn, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}
