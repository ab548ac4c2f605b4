// Package sqllock is the lock strategy for teams that have only a database:
// a SQL advisory lock per SKU (MariaDB/MySQL GET_LOCK, PostgreSQL
// pg_try_advisory_lock, on the FNV-64a hash of the SKU; a collision only
// serialises two SKUs) around a [lockmgr.Store] such as sqlstore's.
//
// A held lock pins one pool connection (its session) until Release; waiters
// poll, borrowing one per try. Give the Locker a pool of its own, larger than
// the locks a process holds at once: on the store's pool, waiters starve the
// holder's store calls. Lost is closed when a ping of the pinned connection
// (each second) fails; a lapse ends in the CAS retry, never an oversell.
package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
)

// DefaultAcquireTimeout is how long Acquire waits before it gives up with
// inventory.ErrContention.
const DefaultAcquireTimeout = 10 * time.Second

// Option configures a Locker.
type Option func(*locker)

// WithAcquireTimeout sets how long Acquire waits; d must be positive.
func WithAcquireTimeout(d time.Duration) Option { return func(l *locker) { l.timeout = d } }

type locker struct {
	db           *sqlx.DB
	pg           bool
	lock, unlock string
	timeout      time.Duration
}

// NewLocker returns a Locker on db, whose driver is "mysql", "pgx" or "postgres".
func NewLocker(db *sqlx.DB, opts ...Option) (lockmgr.Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqllock: nil db", inventory.ErrInvalidArgument)
	}
	l := &locker{db: db, timeout: DefaultAcquireTimeout, lock: "SELECT GET_LOCK(?, 0)", unlock: "SELECT RELEASE_LOCK(?)"}
	if d := db.DriverName(); d == "pgx" || d == "postgres" {
		l.pg, l.lock, l.unlock = true, "SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"
	} else if d != "mysql" {
		return nil, fmt.Errorf("%w: sqllock: driver %q is neither mysql nor pgx/postgres", inventory.ErrInvalidArgument, d)
	}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	if l.timeout <= 0 {
		return nil, fmt.Errorf("%w: sqllock: acquire timeout %v is not positive", inventory.ErrInvalidArgument, l.timeout)
	}
	return l, nil
}

// New returns a Manager that locks with a [NewLocker] on db and keeps stock in store.
func New(db *sqlx.DB, store lockmgr.Store, opts ...Option) (*lockmgr.Manager, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: sqllock: nil store", inventory.ErrInvalidArgument)
	}
	l, err := NewLocker(db, opts...)
	if err != nil {
		return nil, err
	}
	return lockmgr.New(l, store, lockmgr.WithName("sqllock")), nil
}

// key is the advisory lock's argument for name.
func (l *locker) key(name string) any {
	h := fnv.New64a()
	h.Write([]byte(name))
	if l.pg {
		return int64(h.Sum64())
	}
	return fmt.Sprintf("sqllock:%016x", h.Sum64())
}

func (l *locker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	actx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	for wait := 2 * time.Millisecond; ; wait = min(2*wait, 32*time.Millisecond) {
		le, err := l.try(actx, l.key(name))
		switch {
		case le != nil:
			return le, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("sqllock: lock %q: %w", name, ctx.Err())
		case actx.Err() != nil:
			return nil, fmt.Errorf("%w: sqllock: lock %q not free within %v", inventory.ErrContention, name, l.timeout)
		case err != nil:
			return nil, fmt.Errorf("sqllock: lock %q: %w", name, err)
		}
		select {
		case <-actx.Done():
		case <-time.After(rand.N(wait) + time.Millisecond):
		}
	}
}

// try takes the lock once, on a connection it pins only if that succeeds.
func (l *locker) try(ctx context.Context, key any) (*lease, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var ok sql.NullBool
	if err = conn.QueryRowContext(ctx, l.lock, key).Scan(&ok); err != nil || !ok.Bool {
		put(conn, err != nil) // on an error the lock may be held: the session must end
		return nil, err
	}
	le := &lease{conn, l.unlock, key, make(chan struct{}), make(chan struct{}), make(chan struct{})}
	go le.watch()
	return le, nil
}

// put returns conn to the pool, or closes its session when bad.
func put(conn *sql.Conn, bad bool) {
	if bad {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
}

type lease struct {
	conn             *sql.Conn
	unlock           string
	key              any
	lost, stop, done chan struct{}
}

func (le *lease) Lost() <-chan struct{} { return le.lost }

// watch pings the pinned connection until Release, closing lost if it fails.
func (le *lease) watch() {
	defer close(le.done)
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

func (le *lease) Release(ctx context.Context) error {
	close(le.stop)
	<-le.done
	var ok sql.NullBool
	if err := le.conn.QueryRowContext(ctx, le.unlock, le.key).Scan(&ok); err != nil || !ok.Bool {
		put(le.conn, true)
		return fmt.Errorf("sqllock: release %v: not held by this session (%v)", le.key, err)
	}
	put(le.conn, false)
	return nil
}
