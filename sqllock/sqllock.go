package sqllock

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockkit"
)

// DefaultAcquireTimeout is how long Acquire waits by default.
const DefaultAcquireTimeout = 10 * time.Second

// Option configures a Locker. A nil Option is ignored.
type Option func(*locker)

// WithAcquireTimeout sets how long Acquire waits before it fails with
// inventory.ErrContention; d must be positive. The default is [DefaultAcquireTimeout].
func WithAcquireTimeout(d time.Duration) Option { return func(l *locker) { l.timeout = d } }

type locker struct {
	db           *sqlx.DB
	lock, unlock string // statements taking the SKU verbatim: the server hashes it
	timeout      time.Duration
}

// NewLocker returns a Locker on db, whose driver is "mysql", "pgx" or
// "postgres", and which should be a pool of its own. It does no I/O.
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
	return lockkit.NewQueuedLocker(lockkit.QueuedConfig{Name: "sqllock", AcquireTimeout: l.timeout,
		Queue: lockkit.QueueConfig{Depth: 1, MaxHandOvers: 16}}, l.take) // it refuses a bad timeout
}

// New returns a Manager that locks with a [NewLocker] on db and keeps stock in store.
func New(db *sqlx.DB, store lockmgr.Store, opts ...Option) (*lockmgr.Manager, error) {
	l, err := NewLocker(db, opts...)
	if err != nil {
		return nil, err
	}
	return lockmgr.NewManager(l, store, lockmgr.WithName("sqllock"))
}

// take waits in the database for the lock on name, on a connection it pins
// and closes if the wait fails, so a lock granted late goes with it.
func (l *locker) take(ctx, actx context.Context, name string, _ *lockkit.Turn[*lease]) (*lease, error) {
	conn, err := l.db.Conn(actx)
	if granted := false; err == nil {
		if err = conn.QueryRowContext(actx, l.lock, name).Scan(&granted); granted {
			return &lease{lockkit.NewWatch(time.Second, 5*time.Second, conn.PingContext), conn, l.unlock, name}, nil
		}
		_ = conn.Close()
	}
	if ctx.Err() == nil && (actx.Err() != nil || err == nil) { // GET_LOCK gives 0 at the timeout
		err = fmt.Errorf("%w: not free within %v", inventory.ErrContention, l.timeout)
	}
	return nil, fmt.Errorf("sqllock: lock %q: %w", name, cmp.Or(err, ctx.Err()))
}

type lease struct {
	*lockkit.Watch // pings conn
	conn           *sql.Conn
	unlock, name   string
}

// Release implements [lockmgr.Lease]: it frees the lock and the connection.
func (le *lease) Release(ctx context.Context) error {
	le.Stop()
	var ok bool
	err := le.conn.QueryRowContext(ctx, le.unlock, le.name).Scan(&ok)
	if _ = le.conn.Close(); err != nil || !ok {
		return fmt.Errorf("sqllock: release %q: not held by this session (%v)", le.name, err)
	}
	return nil
}
