// Package sqlengine is the engine of the SQL strategies optimistic and
// rowlock, and of sqlstore, over the statements of package sqldialect:
//
//   - [Tables] runs the statements over one schema on one database and
//     makes the errors (tables.go), with the holds (holds.go), the
//     movement ledger (tablemoves.go), transactions and savepoints
//     (atomic.go) and the statements prepared once (prepared.go);
//   - [Orders] runs the calls of [inventory.OrderManager], and single-SKU
//     moves, each in one transaction (or a savepoint of a caller's), over
//     the stock table, the ledger and the holds table (orders.go);
//   - [Orders.MoveBatch] applies the Reduce and Return calls of one SKU
//     that rowlock combined, in one transaction that locks the row once
//     (batch.go);
//   - [Tx] is the calls bound to a caller's transaction, optimistic.Tx and
//     rowlock.Tx, and [Orders.Front] the [Face] optimistic and rowlock
//     embed over their own pool (tx.go).
//
// The layers, top down: optimistic and rowlock (how Reduce and Return
// combine and write), sqlengine (transactions, retries, holds, the ledger
// rules, running the statements), sqldialect (the statements of each
// engine and what else differs between the engines).
// A call goes down once and comes back once.
package sqlengine
