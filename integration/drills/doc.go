// Package drills rehearses failovers of replicated deployments mid-sale and
// measures what each loses: a Redis primary with two replicas behind three
// sentinels, a Redis Cluster of three masters with a replica each, and a
// ZooKeeper ensemble of three. Every deployment is private (free loopback
// ports, data under the test's temp dirs), started from Debian's packages
// (redis-server, redis-sentinel, redis-tools, zookeeper) and killed when its
// test ends.
//
// The drills are tests behind the drills build tag, run by make drills
// (about 15 minutes on 2 cores):
//
//	cd integration/drills && go test -tags drills -count=1 -timeout 40m
//
// Each drill runs a sale of keyed buyers (one unit each; in the Cluster
// drills every third buyer buys a cart of two SKUs in different slots with
// one keyed ReduceLines, beside a reaper sweeping expired holds every
// second), strikes the deployment once, sells on until calls have
// succeeded, and none failed, for a second, then lets the deployment settle
// and checks what the sale left: the stock read back, no units still held,
// and per SKU the invariant initial - final == units sold. A killed process
// is restarted as soon as another took its place, as a supervisor would. A
// buyer retries a call that failed with its idempotency key, backing off
// to a second between tries, until it has a verdict, as a client should. The
// run prints one table (see TestMain) and fails when a drill misses its
// target:
//
//   - sold: units of calls that took effect (a success, or ErrDuplicate on a
//     retry).
//   - oversold: units sold that the settled deployment no longer counts as
//     taken (sold - (initial - final), when positive): each is a unit it will
//     sell a second time.
//   - lost: units the deployment took without a sale (the same difference,
//     when negative).
//   - keys applied twice: keys that took effect and, sent again once the
//     deployment settled, took effect again (anything but ErrDuplicate): the
//     deployment forgot them, so a retry sells twice.
//   - calls failed: attempts that ended without a verdict (each retried).
//   - time until calls succeed again: from the strike to the start of the
//     first call that succeeded after the last failed first attempt started
//     (retries of a call the event cut may fail longer: see the next).
//   - longest wait for a verdict: the longest a buyer retried one call.
//   - late: the most a call returned past its 1s deadline, net of the
//     scheduler's own delay measured beside it (internal/lateness); the
//     contract allows inventory.DeadlineSlack.
//   - double holders (zklock): times a Manager took a SKU's lock while
//     another Manager's lease on it was neither released nor told lost,
//     counted by a probe around the Locker, outside the compare-and-set.
//
// Targets: with WithReplicas 0 oversold and 0 keys applied twice;
// without, oversold at most the keys the promoted replica had not received
// (the keys applied twice); never a lost unit, a call without a verdict, or a
// call later than DeadlineSlack past its deadline; zklock: 0 double holders,
// 0 oversold.
package drills
