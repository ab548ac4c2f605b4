package sqldialect

import "slices"

// Statement is one of a [Tables]' statements, by name, as the engine gets it.
type Statement struct{ Name, SQL string }

// Statements returns every statement of t, the batch ones with two rows.
func (t *Tables) Statements() []Statement {
	q := t.q
	ss := []Statement{
		{"get", q.get}, {"read", q.read}, {"lockTimeout", q.lockTimeout}, {"lock", q.lock},
		{"init", q.init}, {"set", q.set}, {"move", q.move}, {"shift", q.shift},
		{"seen", q.seen}, {"peek", q.peek}, {"record", q.record}, {"renew", q.renew}, {"prune", q.prune},
		{"keys", expand(t.Engine, q.keys, 2)}, {"insert", expand(t.Engine, q.insert, 2)},
		{"readHolds", expand(t.Engine, q.readHolds, 2)}, {"lockHolds", q.lockHolds}, {"expired", q.expired},
		{"release", expand(t.Engine, q.release, 2)}, {"reserve", expand(t.Engine, q.reserve, 2)},
		{"lines", q.lines}, {"lockLines", q.lockLines}, {"confirm", q.confirm}, {"end", q.end},
		{"forget", q.forget}, {"held", q.held}, {"due", q.due}, {"pruneHolds", q.pruneHolds},
	}
	for _, c := range q.create {
		ss = append(ss, Statement{"create", c})
	}
	return slices.DeleteFunc(ss, func(s Statement) bool { return s.SQL == "" }) // lockTimeout, on PostgreSQL alone
}

// MySQLNumber is mysqlNumber.
var MySQLNumber = mysqlNumber

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
