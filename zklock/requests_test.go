package zklock_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/zklock"
)

// requests counts the ZooKeeper requests that pass a proxy, by opcode
// name (pings left out), and keeps them in the order they passed.
type requests struct {
	mu  sync.Mutex
	n   map[string]int
	seq []string
}

// take returns the counts so far and starts again from zero.
func (r *requests) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n, r.seq = map[string]int{}, nil
	return n
}

// mark returns how many requests passed since the last take, for since.
func (r *requests) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seq)
}

// since returns the requests that passed after mark, in order.
func (r *requests) since(mark int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seq[mark:])
}

func (r *requests) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[name]++
	r.seq = append(r.seq, name)
}

var opNames = map[int32]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	8: "children", 9: "sync", 12: "children", 14: "multi", 15: "create", 19: "create"}

// count returns how many requests named name passed so far.
func (r *requests) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}

// countingSession is a session through a proxy that counts its requests.
func countingSession(t *testing.T) (*zk.Conn, *requests) {
	t.Helper()
	r := &requests{n: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := testenv.ZooKeeperAddrs(t)[0] // skips (or fails, CI=true) without a server
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr)
			if err != nil {
				client.Close()
				continue
			}
			wg.Go(func() {
				defer client.Close()
				_, _ = io.Copy(client, server)
			})
			wg.Go(func() {
				defer server.Close()
				r.forward(client, server)
			})
		}
	})
	conn, events, err := zk.Connect([]string{ln.Addr().String()}, 4*time.Second, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		ln.Close()
		wg.Wait()
	})
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, r
			}
		case <-deadline:
			testenv.Missing(t, "ZooKeeper at "+addr, errors.New("no session within 5s"))
		}
	}
}

// forward copies the client's frames to the server, counting each request
// (the first frame, the connect request, has no opcode).
func (r *requests) forward(client, server net.Conn) {
	var size [4]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(client, size[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		if op := int32(0); !first && len(body) >= 8 {
			op = int32(binary.BigEndian.Uint32(body[4:8]))
			if name, ok := opNames[op]; ok {
				r.add(name)
			} else if op != 11 { // ping
				r.add("other")
			}
		}
		if _, err := server.Write(append(size[:], body...)); err != nil {
			return
		}
	}
}

// TestRequestsPerTurn pins what a turn costs ZooKeeper, counted at a proxy.
// Alone, a turn is two writes and no read. In a line of Lockers (as of
// separate processes), each waiter lists the line once to join it, and
// leaves in one write followed by a look at the directory. (That the look
// comes after the write that wakes the next in line, not before it, is not
// visible in the counts.)
func TestRequestsPerTurn(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	conn, reqs := countingSession(t)
	r := root(t, testenv.ZooKeeper(t))
	l := locker(t, conn, zklock.WithRoot(r))
	turn := func(l lockmgr.Locker, name string) {
		lease, err := l.Acquire(ctx, name)
		require.NoError(t, err)
		require.NoError(t, lease.Release(ctx))
	}
	turn(l, "warm-up") // makes the root
	reqs.take()
	for range 5 {
		turn(l, "alone")
	}
	require.Equal(t, map[string]int{"multi": 10}, reqs.take(), "5 turns alone")

	a, b, c := locker(t, conn, zklock.WithRoot(r)), locker(t, conn, zklock.WithRoot(r)), locker(t, conn, zklock.WithRoot(r))
	const name = "line"
	held, err := a.Acquire(ctx, name)
	require.NoError(t, err)
	reqs.take()
	leases := make(chan lockmgr.Lease)
	for i, l := range []lockmgr.Locker{b, c} {
		go func() {
			lease, err := l.Acquire(ctx, name)
			if err != nil {
				t.Error(err)
			}
			leases <- lease
		}()
		// Its watch on the node before it is on its way, ahead of what
		// follows on this session.
		require.Eventually(t, func() bool { return reqs.count("exists") == i+1 }, 5*time.Second, time.Millisecond)
	}
	// a was alone when it came first: its release tries node and
	// directory in one write, which fails, then deletes its node and looks
	// at the directory. b had only a before it: it comes first on a's
	// delete. c comes first on b's release.
	require.NoError(t, held.Release(ctx))
	next := <-leases
	require.NotNil(t, next)
	// b came first on a's delete with no request of its own, and wakes c
	// with its first request: the look at the directory comes after.
	mark := reqs.mark()
	require.NoError(t, next.Release(ctx))
	require.Equal(t, []string{"multi", "exists"}, reqs.since(mark), "b's release")
	last := <-leases
	require.NotNil(t, last)
	require.NoError(t, last.Release(ctx))
	require.Equal(t, map[string]int{
		// b and c join: each a multi that would make the directory too
		// (they have not been there), which fails, a create, a listing
		// and a watch on the node before.
		// a leaves: the failed multi, a delete and a look at the directory.
		// b and c come first on their predecessor's leaving, without a
		// listing: each leaves in a multi that marks and deletes its node,
		// then looks at the directory, which c, the last, deletes.
		"multi":    2 + 1 + 2,
		"create":   2,
		"children": 2,
		"exists":   2 + 1 + 2,
		"delete":   1 + 1,
	}, reqs.take(), "a line of three")
	require.Empty(t, nodes(t, conn, r, name))
}
