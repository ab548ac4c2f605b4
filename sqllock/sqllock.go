// Package sqllock is the lock strategy for teams that have only a database:
// a SQL advisory lock per SKU around a [lockmgr.Store] such as sqlstore's.
// MariaDB/MySQL take GET_LOCK on "sqllock:" + SHA1(SKU); PostgreSQL takes
// pg_advisory_lock on hashtextextended("sqllock:" + SKU, 0), a 64-bit hash
// (PostgreSQL 11 or later; a collision only serialises two SKUs).
//
// # Waiting
//
// Within one process, callers of the same SKU queue in arrival order
// ([lockmgr.NewQueuedLocker]) and only the head of the queue waits for the advisory
// lock, in the database, which grants it when its holder releases: no
// polling. A caller done with the lock hands it, still held, to the next
// caller of its process; after 16 such hand-overs in a row it releases the
// lock so that other processes get their turn. Waiting is bounded by the
// caller's ctx and by [WithAcquireTimeout], after which the call fails with
// [inventory.ErrContention]. A caller that gives up closes the connection
// it waited on; should the database grant that session the lock before it
// notices, the lock goes with the session. (MariaDB/MySQL end such a wait
// after the acquire timeout; PostgreSQL only once it grants the lock.)
//
// # Connections
//
// An advisory lock belongs to a database session, so a held lock pins one
// connection of the Locker's pool until it is released, and the head of
// each SKU's queue holds one more while it waits: a process needs up to two
// connections per SKU it sells at once. Give the Locker a pool of its own
// (another *sqlx.DB on the same database), not the store's: there, waiters
// would take the connections the holders' store calls need. Lost is closed
// when a ping of the pinned connection (each second) fails; a lapse ends in
// the store's compare-and-set retry, never an oversell.
package sqllock

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
)

// DefaultAcquireTimeout is how long Acquire waits before it gives up with
// inventory.ErrContention.
const DefaultAcquireTimeout = 10 * time.Second

// Option configures a Locker. A nil Option is ignored.
type Option func(*locker)

// WithAcquireTimeout sets how long Acquire waits; d must be positive. The
// default is [DefaultAcquireTimeout].
func WithAcquireTimeout(d time.Duration) Option { return func(l *locker) { l.timeout = d } }

type locker struct {
	db           *sqlx.DB
	lock, unlock string // statements taking the SKU verbatim: the server hashes it
	timeout      time.Duration
}

// NewLocker returns a Locker on db, whose driver is "mysql", "pgx" or
// "postgres". db should be a pool of its own (see the package doc). It does
// no I/O.
func NewLocker(db *sqlx.DB, opts ...Option) (lockmgr.Locker, error) {
	l := &locker{db: db, timeout: DefaultAcquireTimeout}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: sqllock: nil db", inventory.ErrInvalidArgument)
	case db.DriverName() == "mysql": // GET_LOCK waits at most the acquire timeout too
		l.lock = fmt.Sprintf("SELECT GET_LOCK(CONCAT('sqllock:', SHA1(?)), %g)", l.timeout.Seconds())
		l.unlock = "SELECT RELEASE_LOCK(CONCAT('sqllock:', SHA1(?)))"
	case db.DriverName() == "pgx" || db.DriverName() == "postgres":
		l.lock = "SELECT true FROM pg_advisory_lock(hashtextextended('sqllock:' || $1::text, 0))"
		l.unlock = "SELECT pg_advisory_unlock(hashtextextended('sqllock:' || $1::text, 0))"
	default:
		return nil, fmt.Errorf("%w: sqllock: driver %q is neither mysql nor pgx/postgres", inventory.ErrInvalidArgument, db.DriverName())
	}
	// One waiter per name in the queue, hand-over of held leases; a bad
	// acquire timeout is refused there.
	return lockmgr.NewQueuedLocker(lockmgr.QueuedConfig{Name: "sqllock", AcquireTimeout: l.timeout,
		Queue: lockmgr.QueueConfig{Depth: 1, MaxHandOvers: 16}}, l.take)
}

// New returns a Manager that locks with a [NewLocker] on db and keeps stock in store.
func New(db *sqlx.DB, store lockmgr.Store, opts ...Option) (*lockmgr.Manager, error) {
	l, err := NewLocker(db, opts...)
	if err != nil {
		return nil, err
	}
	return lockmgr.NewManager(l, store, lockmgr.WithName("sqllock"))
}

// take waits in the database for the lock on name, on a connection it pins,
// for the head of the queue ([lockmgr.TakeFunc]). A wait that fails ends
// its session (the drivers close a connection whose query was cancelled),
// so a lock granted after the caller gave up is freed.
func (l *locker) take(ctx, actx context.Context, name string, _ *lockmgr.Turn[*lease]) (*lease, error) {
	conn, err := l.db.Conn(actx)
	granted := false
	if err == nil {
		if err = conn.QueryRowContext(actx, l.lock, name).Scan(&granted); err == nil && granted {
			le := &lease{conn: conn, unlock: l.unlock, name: name, lost: make(chan struct{}), stop: make(chan struct{})}
			le.watch.Go(le.ping)
			return le, nil
		}
		_ = conn.Close()
	}
	if ctx.Err() == nil && actx.Err() != nil {
		err = fmt.Errorf("%w: not free within %v", inventory.ErrContention, l.timeout)
	}
	return nil, fmt.Errorf("sqllock: lock %q: %w", name, cmp.Or(err, errors.New("lock not granted")))
}

type lease struct {
	conn         *sql.Conn
	unlock, name string
	lost, stop   chan struct{}
	watch        sync.WaitGroup // runs ping
}

// Lost implements [lockmgr.Lease].
func (le *lease) Lost() <-chan struct{} { return le.lost }

// ping pings the pinned connection each second until Release, closing lost
// if a ping fails.
func (le *lease) ping() {
	for {
		select {
		case <-le.stop:
			return
		case <-time.After(time.Second):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := le.conn.PingContext(ctx)
		if cancel(); err != nil {
			close(le.lost)
			return
		}
	}
}

// Release implements [lockmgr.Lease]: it frees the lock and the connection.
// (A lease the queue hands to the next caller is not released.)
func (le *lease) Release(ctx context.Context) error {
	close(le.stop)
	le.watch.Wait()
	var ok bool
	err := le.conn.QueryRowContext(ctx, le.unlock, le.name).Scan(&ok)
	if _ = le.conn.Close(); err != nil || !ok {
		return fmt.Errorf("sqllock: release %q: not held by this session (%v)", le.name, err)
	}
	return nil
}
