// Package sqlengine is the engine of the SQL strategies optimistic and
// rowlock, and of sqlstore, over the statements of package sqldialect.
// Top down:
//
//   - [Orders.Front] is the [Face] optimistic and rowlock embed over their
//     own pool, and [Tx] the calls bound to a caller's transaction,
//     optimistic.Tx and rowlock.Tx (tx.go);
//   - the transaction of one call (batch.go): attempts, lock-wait bounds, a
//     transaction of its own ([Tables.Begin], [Tables.End]) or a savepoint
//     of the caller's, its rows locked or read with their expired holds,
//     and [Orders.MoveBatch], the Reduce and Return calls of one SKU that
//     rowlock combined, in one transaction that locks the row once;
//   - [Orders] runs the calls of [inventory.OrderManager], and single-SKU
//     moves, over it (orders.go), with their movement ledger entries
//     (moves.go);
//   - [Tables] runs the statements over one schema on one database: those
//     of a move, with their prepared forms, the transactions and the
//     precheck (statements.go), the others and the errors (tables.go), the
//     holds (holds.go), the movement ledger (tablemoves.go) and savepoints
//     (atomic.go).
//
// Below it, sqldialect holds the statements of each engine and what else
// differs between the engines. A Reduce or Return goes down these layers
// once and comes back once: no file is entered twice on one chain of calls
// (docs/architecture-sql.md counts the stops).
package sqlengine
