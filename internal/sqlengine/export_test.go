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
