// Package sqllock locks each SKU with a database advisory lock, for teams
// that have only a database: GET_LOCK("sqllock:" + SHA1(SKU)) on MariaDB and
// MySQL, pg_advisory_lock(hashtextextended("sqllock:" + SKU, 0)) on
// PostgreSQL 11+ (a collision only serialises two SKUs), around a
// [lockmgr.Store] such as sqlstore's. Callers of one SKU queue in their
// process
// ([github.com/stockkit/inventory/lockmgr/lockkit.NewQueuedLocker]): the
// head alone waits, in the database, and a released lock passes, still held, to the next caller (16 in a row at
// most). A held lock pins a connection, and so does each SKU's waiting head:
// give the Locker a pool of its own. Lost closes when a ping of the pinned
// connection (each second) fails.
package sqllock
