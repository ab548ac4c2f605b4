package tiered

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
//
// A Manager that first contacts a Redis after it restarted has no run_id
// to compare with, so the server keeps one for it: each Manager's stamp
// (PREFIX:run, beside its keys) is the run_id of the server its state was
// last known good on. A Manager's first command (ensure), or the client's
// first connection to an address, sets the stamp if there is none (SET NX:
// a new or empty Redis) and reads it; a stamp of another run_id came back
// with data written before a restart: its Manager is tripped as for a
// restart seen live, and the command waits for its recovery. After the
// recovery that took in a restart, each Manager stamps the new run_id.
// Not on a Cluster client (its nodes are watched live only), nor on a
// server that refuses the commands before AUTH. The watch keeps nothing
// per move or per SKU: a run_id per address, a flag per stamp read.
type restartWatch struct {
	mu        sync.Mutex
	trusted   map[string]string // addr -> run_id served
	pending   map[string]string // addr -> run_id seen since, not yet taken in
	subs      map[*Manager]bool // the Managers over the client: tripped on a restart
	checked   map[string]bool   // addr + " " + stamp key: the stamp was read at addr
	restamp   map[*Manager]bool // a Manager waiting to stamp (stampAfter)
	addr, db  string            // a plain client's address and database; stamps on
	stampable bool
	opt       *redis.Options // a plain client's (ensure)

	unsure   atomic.Bool // a Manager subscribed whose stamp may be unread (ensure)
	ensureMu sync.Mutex
}

// stampKey is the key of m's stamp.
func (m *Manager) stampKey() string { return m.cfg.prefix + ":run" }

// watches holds the restart watch of each client, shared by the Managers
// over it: one hook per client.
var watches sync.Map // redis.UniversalClient -> *restartWatch

// watch returns rdb's restart watch, with m subscribed to it.
func watch(rdb redis.UniversalClient, m *Manager) *restartWatch {
	w := &restartWatch{trusted: map[string]string{}, pending: map[string]string{}, subs: map[*Manager]bool{},
		checked: map[string]bool{}, restamp: map[*Manager]bool{}}
	if c, ok := rdb.(*redis.Client); ok {
		w.opt = c.Options()
		w.addr, w.db, w.stampable = w.opt.Addr, strconv.Itoa(w.opt.DB), true
	}
	v, loaded := watches.LoadOrStore(rdb, w)
	w = v.(*restartWatch)
	if !loaded {
		w.install(rdb)
	}
	if !m.cfg.trustRestarts {
		w.mu.Lock()
		w.subs[m] = true
		w.mu.Unlock()
		w.unsure.Store(w.stampable)
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
		if _, err := h.w.check(ctx, c, addr); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// ProcessHook implements redis.Hook.
func (h restartHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.w.ensure(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h restartHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.w.ensure(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// ensure reads, on a connection of its own, the stamps of the Managers
// that subscribed since the client last dialed, before any command: a
// Manager made over a client that is connected already is checked before
// its first command, not at the next new connection. A stale stamp trips
// the Managers over the client, and the command waits for their
// recoveries (bounded by its ctx), so that it runs on re-warmed state.
func (w *restartWatch) ensure(ctx context.Context) error {
	if !w.unsure.Load() {
		return nil
	}
	w.ensureMu.Lock()
	if !w.unsure.Swap(false) || len(w.unchecked(w.addr)) == 0 {
		w.ensureMu.Unlock()
		return nil
	}
	c, err := w.opt.Dialer(ctx, w.opt.Network, w.addr)
	if err != nil {
		w.unsure.Store(true)
		w.ensureMu.Unlock()
		return nil // the command's own dial reports it
	}
	tripped, err := w.check(ctx, c, w.addr)
	c.Close()
	w.ensureMu.Unlock()
	if err == nil {
		return nil
	}
	return await(ctx, tripped, err)
}

// await starts the recoveries of the Managers the watch tripped and
// waits until their circuits close, or returns err with ctx's error.
func await(ctx context.Context, tripped []*Manager, err error) error {
	for _, m := range tripped {
		m.br.open() // starts the recovery: the trip ended the open period
		done := m.br.pending()
		if done == nil {
			continue // closed already
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", err, ctx.Err())
		}
	}
	return nil
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

// check reads the run_id of the server on c, and the stamps not yet read
// at addr, and compares them. A new run_id trips every Manager over the
// client, a stale stamp those whose stamp it is; check returns those it
// tripped, with errRestarted.
func (w *restartWatch) check(ctx context.Context, c net.Conn, addr string) ([]*Manager, error) {
	dl := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	if c.SetDeadline(dl) != nil {
		return nil, nil
	}
	defer c.SetDeadline(time.Time{})
	r := bufio.NewReaderSize(c, 4096)
	id, ok := runID(c, r)
	if !ok {
		return nil, nil // the server would not say (AUTH first): nothing to compare
	}
	keys := w.unchecked(addr)
	stale, read := stamps(c, r, w.db, keys, id)
	w.mu.Lock()
	defer w.mu.Unlock()
	if read {
		for _, k := range keys {
			w.checked[addr+" "+k] = true
		}
	}
	trusted, seen := w.trusted[addr]
	restarted := false
	switch {
	case len(w.subs) == 0 || !seen:
		w.trusted[addr] = id
	case w.pending[addr] == id:
		return nil, fmt.Errorf("%w (%s)", errRestarted, addr)
	case id != trusted:
		w.pending[addr] = id
		restarted = true
	}
	if tripped := w.tripAll(restarted, stale); len(tripped) > 0 {
		return tripped, fmt.Errorf("%w (%s)", errRestarted, addr)
	}
	return nil, nil
}

// tripAll trips every subscribed Manager if the server restarted, else
// those whose stamp key is stale, and returns them. w.mu is held.
func (w *restartWatch) tripAll(restarted bool, stale map[string]bool) []*Manager {
	var tripped []*Manager
	for m := range w.subs {
		if restarted || stale[m.stampKey()] {
			w.trip(m)
			tripped = append(tripped, m)
		}
	}
	return tripped
}

// unchecked returns the stamp keys of the subscribed Managers not yet
// read at addr.
func (w *restartWatch) unchecked(addr string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	if !w.stampable || addr != w.addr {
		return nil
	}
	for m := range w.subs {
		if k := m.stampKey(); !w.checked[addr+" "+k] && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
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

// resp encodes a command in RESP.
func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// readReply reads one reply of a simple type (status, error, bulk string,
// integer): its first byte, and its text. A nil bulk string is "$" with
// nil true.
func readReply(r *bufio.Reader) (kind byte, text string, null bool, err error) {
	head, err := r.ReadString('\n')
	if err != nil || len(head) < 3 {
		return 0, "", false, fmt.Errorf("short reply %q: %v", head, err)
	}
	kind, text = head[0], strings.TrimSuffix(head[1:], "\r\n")
	if kind != '$' {
		return kind, text, false, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n > 1<<20 {
		return 0, "", false, fmt.Errorf("bulk length %q", text)
	}
	if n < 0 {
		return kind, "", true, nil
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, "", false, err
	}
	return kind, string(body[:n]), false, nil
}

// runID asks the server on c for its run_id with INFO server, in RESP2.
func runID(c net.Conn, r *bufio.Reader) (string, bool) {
	if _, err := io.WriteString(c, resp("INFO", "server")); err != nil {
		return "", false
	}
	kind, info, null, err := readReply(r)
	if err != nil || kind != '$' || null {
		return "", false
	}
	id, ok := infoField(info, "run_id")
	id = strings.TrimSpace(id)
	return id, ok && id != ""
}

// stamps sets each of keys on c to id where it is not set (SET NX GET, in
// database db) and returns those that held another run_id (stale), and
// whether the server answered them all (read).
func stamps(c net.Conn, r *bufio.Reader, db string, keys []string, id string) (stale map[string]bool, read bool) {
	if len(keys) == 0 {
		return nil, false
	}
	cmds := resp("SELECT", db)
	for _, k := range keys {
		cmds += resp("SET", k, id, "NX", "GET")
	}
	if _, err := io.WriteString(c, cmds); err != nil {
		return nil, false
	}
	stale, read = map[string]bool{}, true
	for i := 0; i <= len(keys); i++ {
		kind, old, null, err := readReply(r)
		switch {
		case err != nil:
			return nil, false // the connection is not usable: go-redis fails its handshake
		case i == 0 && kind != '+', i > 0 && kind != '$':
			read = false // refused (a replica, a server wanting AUTH): cannot tell
		case i > 0 && !null && old != id:
			stale[keys[i-1]] = true
		}
	}
	return stale, read
}

// trip opens the circuit at once for a restart the watch saw: the
// recovery that follows re-warms every SKU (see recoverRedis), and
// stampAfter stamps the new run_id once it has. w.mu is held.
func (w *restartWatch) trip(m *Manager) {
	done := m.br.trip(time.Now())
	if w.stampable && !w.restamp[m] && m.bg.Err() == nil {
		w.restamp[m] = true
		m.wg.Add(1)
		go w.stampAfter(m, done)
	}
}

// stampAfter waits until m's circuit has closed (done) after the recovery
// that took the restart in, with no restart pending, and then stamps the
// run_id that recovery trusted; if m closes first, it stamps then if the
// recovery is over. A stamp that fails leaves the old one: a Manager that
// starts next fences again (an undersell, never an oversell).
func (w *restartWatch) stampAfter(m *Manager, done <-chan struct{}) {
	defer m.wg.Done()
	defer func() {
		w.mu.Lock()
		delete(w.restamp, m)
		w.mu.Unlock()
	}()
	for {
		closing := false
		select {
		case <-done:
		case <-m.bg.Done():
			closing = true
		}
		id, settled, next := w.settled(m)
		if settled {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.refillTO)
			_ = m.rdb.Set(ctx, m.stampKey(), id, 0).Err()
			cancel()
			return
		}
		if closing {
			return
		}
		if done = next; done == nil { // a restart seen after the recovery began: it reopens
			t := time.NewTimer(m.cfg.brOpen)
			select {
			case <-t.C:
			case <-m.bg.Done():
				t.Stop()
			}
			done = closed
		}
	}
}

// closed is a closed channel.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// settled reports whether m's circuit is closed with no restart pending,
// and the run_id then trusted; else the channel that m's circuit closing
// next closes (nil if it is closed already).
func (w *restartWatch) settled(m *Manager) (string, bool, <-chan struct{}) {
	ok, next := m.br.settled()
	w.mu.Lock()
	defer w.mu.Unlock()
	id, seen := w.trusted[w.addr]
	return id, ok && seen && len(w.pending) == 0, next
}
