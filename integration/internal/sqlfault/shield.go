package sqlfault

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CancelShield forwards TCP connections to a server, and can refuse new
// ones while it keeps those it forwards: a PostgreSQL client that gives up
// on a call sends its cancel request over a new connection, which the
// shield then drops before it reaches the server. It stops when t ends.
type CancelShield struct {
	ln     net.Listener
	target string
	refuse atomic.Bool

	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
	stopped bool
}

// NewCancelShield listens on a free loopback port and forwards to target.
func NewCancelShield(t testing.TB, target string) *CancelShield {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cancel shield: %v", err)
	}
	s := &CancelShield{ln: ln, target: target}
	s.wg.Go(s.serve)
	t.Cleanup(s.stop)
	return s
}

// Addr is the address clients dial.
func (s *CancelShield) Addr() string { return s.ln.Addr().String() }

// Refuse drops every new connection from now on, when on, or forwards them
// again.
func (s *CancelShield) Refuse(on bool) { s.refuse.Store(on) }

func (s *CancelShield) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if s.refuse.Load() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", s.target)
		if err != nil {
			c.Close()
			continue
		}
		if !s.track(c, up) {
			return
		}
		s.wg.Go(func() { pipe(up, c) })
		s.wg.Go(func() { pipe(c, up) })
	}
}

// track records the connections to close at stop, or closes them and
// reports false once stop has begun.
func (s *CancelShield) track(cs ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	s.conns = append(s.conns, cs...)
	return true
}

// pipe copies from src to dst, then closes both.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (s *CancelShield) stop() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns, s.stopped = nil, true
	s.mu.Unlock()
	s.wg.Wait()
}
