package sqlengine

import "github.com/stockkit/inventory/internal/sqldialect"

// Statements returns every statement of t, the batch ones with two rows.
func (t *Tables) Statements() []sqldialect.Statement { return t.q.List() }

// Prepared reports whether t holds stmt ("move", "shift", "lockHolds" or
// "set") prepared.
func (t *Tables) Prepared(stmt string) bool {
	p := map[string]*prepared{}
	if t.prep != nil {
		p = map[string]*prepared{"move": t.prep.move, "shift": t.prep.shift, "lockHolds": t.prep.lockHolds, "set": t.prep.set}
	}
	if p[stmt] == nil {
		return false
	}
	return p[stmt].peek() != nil
}

// TakePrecheckConns takes every connection Prechecks may use, as that
// many Prechecks in flight would, and returns how many it took (0 on a
// pool without a limit; at most one more than the pool's) and the func
// that gives them back.
func (t *Tables) TakePrecheckConns() (n int, release func()) {
	var dones []func()
	for limit := t.DB.Stats().MaxOpenConnections; len(dones) < limit+min(limit, 1); {
		done, ok := t.peekTurn()
		if !ok {
			break
		}
		dones = append(dones, done)
	}
	return len(dones), func() {
		for _, d := range dones {
			d()
		}
	}
}

// HoldPrepare makes stmt ("move", "shift", "lockHolds" or "set") look
// prepared by another call until release: a call that needs it prepared
// waits for its turn.
func (t *Tables) HoldPrepare(stmt string) (release func()) {
	p := map[string]*prepared{"move": t.prep.move, "shift": t.prep.shift, "lockHolds": t.prep.lockHolds, "set": t.prep.set}[stmt]
	p.turn <- struct{}{}
	return func() { <-p.turn }
}

// MySQLLiterals is mysqlLiterals.
var MySQLLiterals = mysqlLiterals

// NoCompound makes t's MoveLogged run its transaction, as on a server
// without compound statements (MySQL).
func (t *Tables) NoCompound() { t.noCompound.Store(true) }
