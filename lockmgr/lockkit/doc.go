// Package lockkit holds the parts people who write a [lockmgr.Locker] use,
// as the lockers of sqllock, redislock, redlock and zklock do: a [Queue]
// that lines up one process's callers per name, [NewQueuedLocker], which
// puts one in front of a lock, and [Watch], which gives a session-bound
// lease its Lost. Package lockmgr itself is the Manager and its seams.
package lockkit

import "github.com/stockkit/inventory/lockmgr"

// The Locker and Lease this package builds and wraps.
var _ lockmgr.Locker = (*queued[lockmgr.Lease])(nil)
