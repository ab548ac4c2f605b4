package tiered

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errRestarted is the error of a connection refused because Redis
// restarted since this Manager last dialed it (see restartWatch).
var errRestarted = errors.New("tiered: Redis restarted: its state is fenced until the recovery re-warms it from SQL")

// restartWatch notices a Redis that restarted without any call failing
// first: every new connection asks the server its run_id (INFO server,
// before go-redis's own handshake) and compares it with the one this
// Manager saw at that address. A new run_id trips the circuit ([breaker])
// and refuses the connection, and every later one to that server, until
// the recovery takes it in: nothing reaches a restarted Redis, which may
// have come back older than it acknowledged, before the recovery has
// re-warmed its SKUs from SQL.
type restartWatch struct {
	mu      sync.Mutex
	trusted map[string]string // addr -> run_id served
	pending map[string]string // addr -> run_id seen since, not yet taken in
	subs    map[*Manager]bool // the Managers over the client: tripped on a restart
}

// watches holds the restart watch of each client, shared by the Managers
// over it: one hook per client.
var watches sync.Map // redis.UniversalClient -> *restartWatch

// watch returns rdb's restart watch, with m subscribed to it.
func watch(rdb redis.UniversalClient, m *Manager) *restartWatch {
	w := &restartWatch{trusted: map[string]string{}, pending: map[string]string{}, subs: map[*Manager]bool{}}
	v, loaded := watches.LoadOrStore(rdb, w)
	w = v.(*restartWatch)
	if !loaded {
		w.install(rdb)
	}
	if !m.cfg.trustRestarts {
		w.mu.Lock()
		w.subs[m] = true
		w.mu.Unlock()
	}
	return w
}

// leave unsubscribes m (Close).
func (w *restartWatch) leave(m *Manager) {
	w.mu.Lock()
	delete(w.subs, m)
	w.mu.Unlock()
}

// restartHook is the go-redis hook of a restartWatch.
type restartHook struct{ w *restartWatch }

// DialHook implements redis.Hook.
func (h restartHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return c, err
		}
		if err := h.w.check(ctx, c, addr); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// ProcessHook implements redis.Hook.
func (restartHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (restartHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// install adds the watch's hook to rdb: a plain or failover client, or
// every node of a Cluster client made after it.
func (w *restartWatch) install(rdb redis.UniversalClient) {
	h := restartHook{w}
	switch c := rdb.(type) {
	case *redis.Client:
		c.AddHook(h)
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	}
}

// check reads the run_id of the server on c and compares it.
func (w *restartWatch) check(ctx context.Context, c net.Conn, addr string) error {
	id, ok := runID(ctx, c)
	if !ok {
		return nil // the server would not say (AUTH first): nothing to compare
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	trusted, seen := w.trusted[addr]
	switch {
	case !seen || len(w.subs) == 0:
		w.trusted[addr] = id
		return nil
	case id == trusted:
		return nil
	}
	if w.pending[addr] != id {
		w.pending[addr] = id
		for m := range w.subs {
			m.trip()
		}
	}
	return fmt.Errorf("%w (%s)", errRestarted, addr)
}

// accept takes in the servers that restarted: a recovery runs next (the
// other Managers over the client were tripped too, and re-warm when their
// circuit recovers).
// It reports whether there were any.
func (w *restartWatch) accept() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	some := len(w.pending) > 0
	for addr, id := range w.pending {
		w.trusted[addr] = id
		delete(w.pending, addr)
	}
	return some
}

// runID asks the server on c for its run_id with INFO server, in RESP2,
// within a second.
func runID(ctx context.Context, c net.Conn) (string, bool) {
	dl := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	if c.SetDeadline(dl) != nil {
		return "", false
	}
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", false
	}
	r := bufio.NewReaderSize(c, 4096)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", false
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return "", false
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", false
	}
	id, ok := infoField(string(body), "run_id")
	return strings.TrimSpace(id), ok && id != ""
}

// trip opens the circuit at once for a restart the watch saw: the
// recovery that follows re-warms every SKU (see recoverRedis).
func (m *Manager) trip() {
	b := &m.br
	b.mu.Lock()
	defer b.mu.Unlock()
	b.restart = true
	if b.state != brClosed {
		return
	}
	now := time.Now()
	b.state, b.until, b.outage = brOpen, now, now
	b.start = m.startRecovery
	if b.done == nil {
		b.done = make(chan struct{})
	}
}
