package zklock

// This file: the lock recipe itself: create an ephemeral sequential node,
// list the directory, watch the predecessor, delete the node (and the
// directory when it is empty).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
)

// create makes this caller's ephemeral sequential node in dir, creating dir
// (and the root) when missing, and returns its path. With fresh, dir is
// probably missing (no other caller of this process is at it), and create
// makes dir and the node in one write; the bool reports that it did, and so
// that node is the first in line (any later node has a higher sequence
// number). A create given up on when ctx is done is undone once its
// outcome is known.
func (l *locker) create(ctx context.Context, dir string, fresh bool) (string, bool, error) {
	var g [8]byte
	if _, err := rand.Read(g[:]); err != nil {
		return "", false, err
	}
	guid := hex.EncodeToString(g[:])
	mine := &zk.CreateRequest{Path: dir + "/" + guid + "-", Acl: l.cfg.acl, Flags: zk.FlagEphemeral | zk.FlagSequence}
	for range 10 {
		node, err := l.createOnce(ctx, dir, guid, mine, fresh)
		switch {
		case err == nil && node != "":
			return node, fresh, nil
		case ctx.Err() != nil: // given up: discard deletes the node, if any
			return "", false, err
		case errors.Is(err, zk.ErrNodeExists): // dir is there after all
			fresh = false
		case errors.Is(err, zk.ErrNoNode) && fresh: // the root is missing
			if err := l.mkdirs(ctx, l.cfg.root); err != nil {
				return "", false, err
			}
		case errors.Is(err, zk.ErrNoNode): // dir is gone: its last holder deleted it
			fresh = true
		case err == nil:
			return "", false, errors.New("ZooKeeper did not return the created node")
		case definite(err):
			return "", false, err
		default:
			found, err := l.findLost(ctx, dir, guid, err)
			return found, false, err
		}
	}
	return "", false, fmt.Errorf("%s keeps vanishing", dir)
}

// createOnce sends the create of mine, with dir in the same write when
// fresh, and returns the node made. A create given up on when ctx is done
// is undone once its outcome is known.
func (l *locker) createOnce(ctx context.Context, dir, guid string, mine *zk.CreateRequest, fresh bool) (string, error) {
	var node string
	err := do(ctx, func() error {
		if !fresh {
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
	if err != nil {
		return "", err // node is op's until op ends: discard's, if ctx ended first
	}
	return node, nil
}

// findLost looks for the node of a create whose reply was lost (with
// error lost): the server may have made it. Found by its GUID, it is ours,
// in line like any other. Not found, the error is lost (joined to the
// listing's error when the listing failed, when a node made after all is
// discarded in the background if ctx is done).
func (l *locker) findLost(ctx context.Context, dir, guid string, lost error) (string, error) {
	found, err := l.find(ctx, dir, guid)
	switch {
	case found != "":
		return found, nil
	case err != nil:
		if ctx.Err() != nil {
			go l.discard(dir, guid, "", lost)
		}
		return "", errors.Join(lost, err)
	}
	return "", lost
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

// seq returns the sequence number of a lock node name, GUID-SEQ.
func seq(name string) (int64, bool) {
	_, s, ok := strings.Cut(name, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// place finds node in a listing of dir: the nodes just before and just
// after it in line ("" when none), how many come before it, and whether it
// is there at all.
func place(children []string, dir, node string) (pred, next string, before int, mine bool) {
	me, _ := seq(path.Base(node))
	predSeq, nextSeq := int64(-1), int64(-1)
	for _, c := range children {
		s, ok := seq(c)
		switch {
		case !ok:
		case dir+"/"+c == node:
			mine = true
		case s < me:
			before++
			if s > predSeq {
				pred, predSeq = c, s
			}
		case next == "" || s < nextSeq:
			next, nextSeq = c, s
		}
	}
	return pred, next, before, mine
}

// released is the data a holder writes to its node in the write that
// deletes it (see lease.Release): the watch of the next in line then fires
// NodeDataChanged, not NodeDeleted.
var released = []byte("released")

// wait returns once node is the lowest in dir, or with an error when ctx is
// done, the session was lost or node vanished. When known, next is then
// the node just after it in line (its name in dir), "" when node was alone
// in dir; otherwise nobody listed dir since node came first.
//
// A waiter watches only its predecessor. It comes first without listing
// dir again when the predecessor was the only node before it, or when the
// predecessor's watch fired NodeDataChanged: only a holder writes to its
// node, in the one write that deletes it, and once a holder is gone nobody
// is before the node that came just after it (sequence numbers only grow).
// A predecessor that withdrew or went with its session fires NodeDeleted:
// the waiter lists dir again.
func (l *locker) wait(ctx context.Context, dir, node string, down <-chan struct{}) (next string, known bool, err error) {
	for {
		var children []string
		err := do(ctx, func() (err error) { children, _, err = l.conn.Children(dir); return err }, nil)
		if err != nil {
			return "", false, err
		}
		pred, next, before, mine := place(children, dir, node)
		switch {
		case !mine:
			return "", false, fmt.Errorf("the lock node vanished (session expired?): %w", zk.ErrNoNode)
		case pred == "":
			return next, true, nil
		}
		var exists bool
		var ch <-chan zk.Event
		err = do(ctx, func() (err error) { exists, _, ch, err = l.conn.ExistsW(dir + "/" + pred); return err }, nil)
		if err != nil {
			return "", false, err
		}
		if !exists {
			if before == 1 {
				return "", false, nil
			}
			continue
		}
		select {
		case ev := <-ch:
			switch {
			case ev.Err != nil:
				return "", false, ev.Err
			case ev.Type == zk.EventNodeDataChanged, ev.Type == zk.EventNodeDeleted && before == 1:
				return "", false, nil
			}
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-down:
			return "", false, fmt.Errorf("the ZooKeeper session was lost: %w", zk.ErrConnectionClosed)
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
		ok, st, err := l.conn.Exists(dir)
		switch {
		case err != nil:
		case ok && st.NumChildren > 0: // others are in line: dir stays
			l.busy.set(dir, true)
		case ok:
			if err := l.conn.Delete(dir, -1); err == nil || errors.Is(err, zk.ErrNoNode) {
				l.busy.set(dir, false)
			}
		default:
			l.busy.set(dir, false)
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
