package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/ledger"
)

// buyRequest is the body of POST /buy.
type buyRequest struct {
	SKU   string `json:"sku"`
	Buyer string `json:"buyer"` // the idempotency key: one purchase per buyer and SKU
	Qty   *int64 `json:"qty"`   // default 1
}

// line is one SKU and quantity of an order.
type line struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

// reserveRequest is the body of POST /reserve.
type reserveRequest struct {
	Order string `json:"order"` // the hold's id and idempotency key
	Lines []line `json:"lines"`
	TTLMS *int64 `json:"ttl_ms"` // default -hold-ttl
}

// orderRequest is the body of POST /confirm and POST /cancel.
type orderRequest struct {
	Order string `json:"order"`
}

// shortLine is a line of a refused order, with the stock the backend saw.
type shortLine struct {
	SKU       string `json:"sku"`
	Qty       int64  `json:"qty"`
	Available int64  `json:"available"`
}

// historyEntry is one ledger entry of GET /history (package ledger's
// Entry).
type historyEntry struct {
	Pos       int64     `json:"pos"`  // the entry's position: the after of the next page
	Kind      string    `json:"kind"` // init, reduce, return, reserve, confirm, cancel or expire
	Units     int64     `json:"units"`
	Available int64     `json:"available"` // the stock after the entry
	Held      int64     `json:"held"`
	Sold      int64     `json:"sold"`
	Key       string    `json:"key,omitempty"`  // the call's idempotency key: a buyer id, an order id
	Ref       string    `json:"ref,omitempty"`  // the call's reference
	Hold      string    `json:"hold,omitempty"` // the hold id (the order id) of a hold's entry
	Time      time.Time `json:"time"`           // when the move took effect, on the backend's clock
}

// response is the body of every answer.
type response struct {
	// Status is one of bought, already_bought, sold_out, not_found,
	// invalid, method_not_allowed, busy, timeout, unavailable, canceled
	// (the client went away: nobody reads it); ok for GET /stock and GET
	// /history; reserved, already_reserved, confirmed, already_confirmed,
	// released, cancelled, not_implemented for the order endpoints and
	// GET /history.
	Status    string      `json:"status"`
	SKU       string      `json:"sku,omitempty"`
	Order     string      `json:"order,omitempty"`
	Remaining *int64      `json:"remaining,omitempty"` // stock left after the purchase
	Stock     *int64      `json:"stock,omitempty"`     // GET /stock: the current stock
	Held      *int64      `json:"held,omitempty"`      // GET /stock: units in holds not yet released
	TTLMS     int64       `json:"ttl_ms,omitempty"`    // POST /reserve: the hold's TTL
	Short     []shortLine `json:"short,omitempty"`     // sold_out of POST /reserve: the lines that did not fit
	// GET /history: the page of the SKU's ledger (omitted when empty), and
	// the after of the next page (the last entry's pos, or the request's
	// after when the page is empty).
	Entries []historyEntry `json:"entries,omitempty"`
	Next    *int64         `json:"next,omitempty"`
	Message string         `json:"message,omitempty"`
}

// maxBody bounds a request body: a SKU and a buyer id are at most 255 bytes.
const maxBody = 4 << 10

// newHandler serves the flash sale over stock: POST /buy, GET
// /stock/{sku}, POST /reserve, /confirm and /cancel when stock is an
// inventory.OrderManager, holds lasting holdTTL unless the request says
// otherwise, and GET /history/{sku} when the Manager under stock's
// decorators keeps a ledger. Each request gets at most timeout; errors of
// the backend are logged to log and answered without their details.
func newHandler(stock inventory.StockManager, timeout, holdTTL time.Duration, log *slog.Logger) http.Handler {
	h := &handler{stock: stock, timeout: timeout, holdTTL: holdTTL, log: log}
	h.orders, _ = stock.(inventory.OrderManager)
	h.ledger = ledgerOf(stock)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /buy", h.buy)
	mux.HandleFunc("GET /stock/{sku...}", h.get)
	mux.HandleFunc("GET /history/{sku...}", h.history)
	mux.HandleFunc("POST /reserve", h.reserve)
	mux.HandleFunc("POST /confirm", h.confirm)
	mux.HandleFunc("POST /cancel", h.cancel)
	for _, p := range []string{"/reserve", "/confirm", "/cancel"} {
		mux.Handle(p, methodNotAllowed(http.MethodPost))
	}
	// The mux's own 404 and 405 answers are plain text: these answer with
	// the JSON of every other answer. A pattern with a method is more
	// specific than the same path without one, so these catch only what
	// the routes above do not.
	mux.Handle("/buy", methodNotAllowed(http.MethodPost))
	mux.Handle("/stock/", methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.Handle("/history/", methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusNotFound, response{Status: "not_found", Message: "no such endpoint: POST /buy, /reserve, /confirm, /cancel or GET /stock/{sku}, /history/{sku}"})
	})
	return mux
}

// ledgerOf returns the ledger.Reader under m's decorators (each an
// Unwrap method away from the Manager it wraps), or nil.
func ledgerOf(m inventory.StockManager) ledger.Reader {
	for {
		if r, ok := m.(ledger.Reader); ok {
			return r
		}
		w, ok := m.(interface{ Unwrap() inventory.StockManager })
		if !ok {
			return nil
		}
		m = w.Unwrap()
	}
}

// methodNotAllowed answers 405 with an Allow header naming allowed.
func methodNotAllowed(allowed ...string) http.Handler {
	allow := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		reply(w, http.StatusMethodNotAllowed, response{Status: "method_not_allowed", Message: "allowed: " + allow})
	})
}

type handler struct {
	stock   inventory.StockManager
	orders  inventory.OrderManager // nil: the order endpoints answer 501
	ledger  ledger.Reader          // nil: GET /history answers 501
	timeout time.Duration
	holdTTL time.Duration
	log     *slog.Logger
}

// decode reads the request's body, one JSON object of at most max bytes
// with no unknown field, into v; it answers 400 and returns false when the
// body is not that.
func decode(w http.ResponseWriter, r *http.Request, max int64, v any) bool {
	body := http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		reply(w, http.StatusBadRequest, response{Status: "invalid", Message: "body: " + err.Error()})
		return false
	}
	// One JSON object and nothing after it but white space: a body with
	// more is a client bug, not a purchase.
	after, _ := io.ReadAll(dec.Buffered())
	if len(bytes.TrimLeft(after, " \t\r\n")) > 0 {
		reply(w, http.StatusBadRequest, response{Status: "invalid", Message: "body: data after the JSON object"})
		return false
	}
	if r.ContentLength < 0 { // chunked: the last chunk ends the body
		return trailer(w, body, -1, 0)
	}
	got := dec.InputOffset() + int64(len(after))
	if missing := r.ContentLength - got; missing > 0 {
		// The object is whole and the Content-Length promises more
		// bytes than came: read what has arrived, and do not wait for
		// the rest. A client that sent fewer bytes than it declared
		// gets its answer now, not at the server's read timeout.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now())
		if !trailer(w, body, missing, got) {
			return false
		}
		_ = rc.SetReadDeadline(time.Time{}) // the body is read: the connection may serve another request
	}
	return true
}

// trailer reads the rest of a body after its JSON object, all of it when
// want < 0, else want bytes, of which none may have to be waited for; it
// answers 400 and returns false when the rest is not white space or comes
// short of want. got bytes of the body came before it.
func trailer(w http.ResponseWriter, body io.Reader, want, got int64) bool {
	rest := body
	if want >= 0 {
		rest = io.LimitReader(body, want)
	}
	var n int64
	buf := make([]byte, 512)
	for {
		k, err := rest.Read(buf)
		if len(bytes.TrimLeft(buf[:k], " \t\r\n")) > 0 {
			reply(w, http.StatusBadRequest, response{Status: "invalid", Message: "body: data after the JSON object"})
			return false
		}
		n += int64(k)
		var tooLarge *http.MaxBytesError
		switch {
		case err == nil:
			continue
		case err == io.EOF && n >= want:
			return true
		case errors.As(err, &tooLarge), want < 0:
			reply(w, http.StatusBadRequest, response{Status: "invalid", Message: "body: " + err.Error()})
		default: // the bytes still owed have not come, or never will
			w.Header().Set("Connection", "close")
			reply(w, http.StatusBadRequest, response{Status: "invalid", Message: fmt.Sprintf(
				"body: shorter than its Content-Length: %d bytes declared, %d received", got+want, got+n)})
		}
		return false
	}
}

func (h *handler) buy(w http.ResponseWriter, r *http.Request) {
	var req buyRequest
	if !decode(w, r, maxBody, &req) {
		return
	}
	if req.Buyer == "" {
		reply(w, http.StatusBadRequest, response{Status: "invalid", SKU: req.SKU,
			Message: "buyer is required: the buyer id makes a purchase happen once per buyer and SKU"})
		return
	}
	qty := int64(1)
	if req.Qty != nil {
		qty = *req.Qty
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	// The buyer id is the idempotency key: a buyer who clicks twice, or whose
	// client retries after a timeout, is charged once.
	left, err := h.stock.Reduce(ctx, req.SKU, qty, inventory.WithKey(req.Buyer))
	switch {
	case err == nil:
		reply(w, http.StatusOK, response{Status: "bought", SKU: req.SKU, Remaining: &left})
	case errors.Is(err, inventory.ErrDuplicate):
		// The purchase took effect earlier: answer as then, so a retry
		// after a timeout learns that it bought.
		reply(w, http.StatusOK, response{Status: "already_bought", SKU: req.SKU, Remaining: &left,
			Message: fmt.Sprintf("buyer %q already bought %q; nothing more was taken", req.Buyer, req.SKU)})
	case errors.Is(err, inventory.ErrInsufficientStock):
		reply(w, http.StatusConflict, response{Status: "sold_out", SKU: req.SKU, Remaining: &left,
			Message: fmt.Sprintf("%d left, %d asked", left, qty)})
	default:
		h.fail(w, r, req.SKU, err)
	}
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	n, err := h.stock.Get(ctx, sku)
	if err != nil {
		h.fail(w, r, sku, err)
		return
	}
	res := response{Status: "ok", SKU: sku, Stock: &n}
	if h.orders != nil {
		held, err := h.orders.Held(ctx, sku)
		if err != nil {
			h.fail(w, r, sku, err)
			return
		}
		res.Held = &held
	}
	reply(w, http.StatusOK, res)
}

// defaultHistoryLimit is the limit of a GET /history that gives none.
const defaultHistoryLimit = 100

// history answers GET /history/{sku}?after=N&limit=M: up to limit (1..1000,
// default 100) entries of the SKU's ledger after position after (default
// 0: from the first), in order.
func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
	after, limit, err := pageOf(r)
	if err == nil {
		err = driver.ValidateSKU(sku)
	}
	if err == nil {
		err = ledger.CheckPage(after, limit)
	}
	if err != nil {
		reply(w, http.StatusBadRequest, response{Status: "invalid", SKU: sku, Message: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	var page []ledger.Entry
	if h.ledger == nil {
		err = ledger.ErrNotKept
	} else {
		page, err = h.ledger.Entries(ctx, sku, after, limit)
	}
	if err == nil && len(page) == 0 && after == 0 {
		_, err = h.stock.Get(ctx, sku) // no entry: is there such a SKU?
	}
	switch {
	case errors.Is(err, ledger.ErrNotKept):
		reply(w, http.StatusNotImplemented, response{Status: "not_implemented", SKU: sku,
			Message: "this service keeps no movement ledger: run it with -ledger (every -strategy keeps one)"})
		return
	case err != nil:
		h.fail(w, r, sku, err)
		return
	}
	res := response{Status: "ok", SKU: sku, Next: &after}
	for _, e := range page {
		res.Entries = append(res.Entries, historyEntry{Pos: e.Pos, Kind: string(e.Kind), Units: e.Units,
			Available: e.After.Available, Held: e.After.Held, Sold: e.After.Sold,
			Key: e.Key, Ref: e.Ref, Hold: e.Hold, Time: e.Time})
		res.Next = &e.Pos
	}
	reply(w, http.StatusOK, res)
}

// pageOf returns the after and limit query parameters of r, 0 and
// defaultHistoryLimit when absent, or an error wrapping
// inventory.ErrInvalidArgument when one is not an integer.
func pageOf(r *http.Request) (after int64, limit int, err error) {
	q := r.URL.Query()
	after, limit = 0, defaultHistoryLimit
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, badNumber("after", s, err)
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil {
			return 0, 0, badNumber("limit", s, err)
		}
	}
	return after, limit, nil
}

// badNumber is the error of query parameter name's value s, which strconv
// refused with err.
func badNumber(name, s string, err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		err = ne.Err // "invalid syntax", "value out of range"
	}
	return fmt.Errorf("%w: %s %q: want an integer: %v", inventory.ErrInvalidArgument, name, s, err)
}

// maxOrderBody bounds the body of POST /reserve: up to MaxLines lines of a
// SKU of at most 255 bytes each.
const maxOrderBody = maxBody + inventory.MaxLines*(255+64)

// orderCall decodes an order request into req and returns the order
// manager and a ctx of at most h.timeout, or answers and returns nil.
func (h *handler) orderCall(w http.ResponseWriter, r *http.Request, max int64, req any) (inventory.OrderManager, context.Context, context.CancelFunc) {
	if h.orders == nil {
		reply(w, http.StatusNotImplemented, response{Status: "not_implemented",
			Message: "this strategy has no holds (it is not an inventory.OrderManager): POST /buy sells without a hold"})
		return nil, nil, nil
	}
	if !decode(w, r, max, req) {
		return nil, nil, nil
	}
	if orderID(req) == "" {
		reply(w, http.StatusBadRequest, response{Status: "invalid",
			Message: "order is required: the order id is the hold's id, so that a retry holds the cart once"})
		return nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	return h.orders, ctx, cancel
}

// orderID is the order id of a decoded order request.
func orderID(req any) string {
	switch r := req.(type) {
	case *reserveRequest:
		return r.Order
	case *orderRequest:
		return r.Order
	}
	panic(fmt.Sprintf("orderID: %T", req))
}

func (h *handler) reserve(w http.ResponseWriter, r *http.Request) {
	var req reserveRequest
	om, ctx, cancel := h.orderCall(w, r, maxOrderBody, &req)
	if om == nil {
		return
	}
	defer cancel()
	ttl := h.holdTTL
	if req.TTLMS != nil {
		ttl = time.Duration(*req.TTLMS) * time.Millisecond
		if *req.TTLMS < 1 || *req.TTLMS > int64(inventory.MaxHoldTTL/time.Millisecond) {
			reply(w, http.StatusBadRequest, response{Status: "invalid", Order: req.Order,
				Message: fmt.Sprintf("ttl_ms %d outside 1..%d", *req.TTLMS, inventory.MaxHoldTTL/time.Millisecond)})
			return
		}
	}
	lines := make([]inventory.Line, len(req.Lines))
	for i, l := range req.Lines {
		lines[i] = inventory.Line{SKU: l.SKU, Qty: l.Qty}
	}
	// The order id is the hold's id, so a client that retries after a
	// timeout holds the cart once.
	err := om.Reserve(ctx, req.Order, lines, ttl)
	var short *inventory.InsufficientError
	switch {
	case err == nil:
		reply(w, http.StatusOK, response{Status: "reserved", Order: req.Order, TTLMS: ttl.Milliseconds()})
	case errors.Is(err, inventory.ErrDuplicate):
		reply(w, http.StatusOK, response{Status: "already_reserved", Order: req.Order,
			Message: fmt.Sprintf("order %q is held, or ended recently; nothing more was taken; /confirm says which", req.Order)})
	case errors.As(err, &short):
		res := response{Status: "sold_out", Order: req.Order, Message: "some lines do not fit; nothing was taken"}
		for _, s := range short.Short {
			res.Short = append(res.Short, shortLine{SKU: s.SKU, Qty: s.Qty, Available: s.Available})
		}
		reply(w, http.StatusConflict, res)
	default:
		h.failOrder(w, r, req.Order, err)
	}
}

func (h *handler) confirm(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	om, ctx, cancel := h.orderCall(w, r, maxBody, &req)
	if om == nil {
		return
	}
	defer cancel()
	switch err := om.Confirm(ctx, req.Order); {
	case err == nil:
		reply(w, http.StatusOK, response{Status: "confirmed", Order: req.Order})
	case errors.Is(err, inventory.ErrDuplicate):
		reply(w, http.StatusOK, response{Status: "already_confirmed", Order: req.Order,
			Message: fmt.Sprintf("order %q was confirmed before; nothing changed", req.Order)})
	case errors.Is(err, inventory.ErrHoldReleased):
		reply(w, http.StatusGone, response{Status: "released", Order: req.Order,
			Message: fmt.Sprintf("the hold of order %q expired or was cancelled: its units are back; nothing was sold", req.Order)})
	default:
		h.failOrder(w, r, req.Order, err)
	}
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	om, ctx, cancel := h.orderCall(w, r, maxBody, &req)
	if om == nil {
		return
	}
	defer cancel()
	switch err := om.Cancel(ctx, req.Order); {
	case err == nil:
		reply(w, http.StatusOK, response{Status: "cancelled", Order: req.Order})
	case errors.Is(err, inventory.ErrHoldConfirmed):
		reply(w, http.StatusConflict, response{Status: "confirmed", Order: req.Order,
			Message: fmt.Sprintf("order %q is confirmed: its units are sold, and giving them back is a refund; nothing changed", req.Order)})
	default:
		h.failOrder(w, r, req.Order, err)
	}
}

// failOrder is fail for the order endpoints: a 404 names the order.
func (h *handler) failOrder(w http.ResponseWriter, r *http.Request, order string, err error) {
	if errors.Is(err, inventory.ErrNotFound) {
		reply(w, http.StatusNotFound, response{Status: "not_found", Order: order,
			Message: "no such order (or it ended more than the key TTL ago), or a line's SKU does not exist"})
		return
	}
	h.fail(w, r, "", err)
}

// fail answers an error that is not a sale's verdict. The client may retry
// what the answer says is retryable: with the same buyer id, a purchase that
// did go through is reported as already_bought.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, sku string, err error) {
	switch {
	case errors.Is(err, inventory.ErrNotFound):
		reply(w, http.StatusNotFound, response{Status: "not_found", SKU: sku, Message: "no such SKU"})
	case errors.Is(err, inventory.ErrInvalidArgument):
		reply(w, http.StatusBadRequest, response{Status: "invalid", Message: err.Error()})
	case errors.Is(err, inventory.ErrContention):
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusServiceUnavailable, response{Status: "busy", SKU: sku,
			Message: "too many buyers at once; nothing was taken; try again"})
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away: nobody reads this answer, and it is not
		// the backend's fault. A purchase it may have made is kept, and a
		// retry with the same buyer id learns of it.
		h.log.Debug("client gone", "method", r.Method, "path", r.URL.Path, "err", err)
		reply(w, http.StatusServiceUnavailable, response{Status: "canceled", SKU: sku,
			Message: "the request was canceled; a purchase may be retried with the same buyer id"})
	case errors.Is(err, context.DeadlineExceeded):
		h.log.Warn("timeout", "method", r.Method, "path", r.URL.Path, "err", err)
		reply(w, http.StatusGatewayTimeout, response{Status: "timeout", SKU: sku,
			Message: "the stock service did not answer in time; a purchase may be retried with the same buyer id"})
	default:
		h.log.Error("backend", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusServiceUnavailable, response{Status: "unavailable", SKU: sku,
			Message: "the stock service failed; a purchase may be retried with the same buyer id"})
	}
}

func reply(w http.ResponseWriter, code int, body response) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
