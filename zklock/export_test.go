package zklock

import (
	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory/lockmgr"
)

// NewLocker returns the Locker that a Manager with these arguments uses.
func NewLocker(conn *zk.Conn, opts ...Option) (lockmgr.Locker, error) {
	l, _, err := newLocker(conn, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Dir is the lock directory of name under root.
func Dir(root, name string) string {
	return (&locker{cfg: config{root: root}}).dir(name)
}
