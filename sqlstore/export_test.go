package sqlstore

import "github.com/stockkit/inventory/internal/sqlengine"

// Holds is the statements of a Store's holds, for the tests.
type Holds = holds

// Holds returns the hold statements of s.
func (s *Store) Holds() *Holds { return s.h }

// Tables returns the shared statements under s.
func (s *Store) Tables() *sqlengine.Tables { return s.t }

// Statement is one of the hold statements, by name, as the engine gets it.
type Statement struct{ Name, SQL string }

// Statements returns the hold statements of h.
func (h *holds) Statements() []Statement {
	q := h.q
	return []Statement{
		{"holdsOf", q.holdsOf}, {"holdLine", q.holdLine}, {"lockLine", q.lockLine}, {"dropLine", q.dropLine},
		{"give", q.give}, {"createOrder", q.createOrder}, {"order", q.order}, {"lockOrder", q.lockOrder},
		{"setOrder", q.setOrder}, {"dropOrder", q.dropOrder}, {"forgetOrder", q.forgetOrder},
		{"dueOrders", q.dueOrders}, {"pruneOrders", q.pruneOrders},
	}
}
