package zklock

// This file: the session and the connection: requests bounded by ctx over
// a client that takes none, retries over a lost connection, waiting for a
// session, and the session watcher that marks leases lost.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

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
