package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/stockkit/inventory"
)

// buyRequest is the body of POST /buy.
type buyRequest struct {
	SKU   string `json:"sku"`
	Buyer string `json:"buyer"` // the idempotency key: one purchase per buyer and SKU
	Qty   *int64 `json:"qty"`   // default 1
}

// response is the body of every answer.
type response struct {
	// Status is one of bought, already_bought, sold_out, not_found,
	// invalid, method_not_allowed, busy, timeout, unavailable, canceled
	// (the client went away: nobody reads it); or ok for GET /stock.
	Status    string `json:"status"`
	SKU       string `json:"sku,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"` // stock left after the purchase
	Stock     *int64 `json:"stock,omitempty"`     // GET /stock: the current stock
	Message   string `json:"message,omitempty"`
}

// maxBody bounds a request body: a SKU and a buyer id are at most 255 bytes.
const maxBody = 4 << 10

// newHandler serves the flash sale over stock: POST /buy and GET
// /stock/{sku}. Each request gets at most timeout; errors of the backend are
// logged to log and answered without their details.
func newHandler(stock inventory.StockManager, timeout time.Duration, log *slog.Logger) http.Handler {
	h := &handler{stock: stock, timeout: timeout, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /buy", h.buy)
	mux.HandleFunc("GET /stock/{sku...}", h.get)
	// The mux's own 404 and 405 answers are plain text: these answer with
	// the JSON of every other answer. A pattern with a method is more
	// specific than the same path without one, so these catch only what
	// the routes above do not.
	mux.Handle("/buy", methodNotAllowed(http.MethodPost))
	mux.Handle("/stock/", methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusNotFound, response{Status: "not_found", Message: "no such endpoint: POST /buy or GET /stock/{sku}"})
	})
	return mux
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
	timeout time.Duration
	log     *slog.Logger
}

func (h *handler) buy(w http.ResponseWriter, r *http.Request) {
	var req buyRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		reply(w, http.StatusBadRequest, response{Status: "invalid", Message: "body: " + err.Error()})
		return
	}
	// One JSON object and nothing after it but white space: a body with
	// more is a client bug, not a purchase.
	if _, err := dec.Token(); err != io.EOF {
		reply(w, http.StatusBadRequest, response{Status: "invalid", Message: "body: data after the JSON object"})
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
	reply(w, http.StatusOK, response{Status: "ok", SKU: sku, Stock: &n})
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
