package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
)

// Holds: a Store is a [lockmgr.HoldStore], so a lock strategy over it
// implements [inventory.OrderManager].
//
// Beside a SKU's stock key, and under the same hash tag, three keys keep its
// holds: PREFIX{tag}:hl:SKU, a hash of its hold lines (order id -> qty);
// PREFIX{tag}:hd:SKU, the same lines by expiry (a sorted set, Unix ms on the
// Redis clock); and PREFIX{tag}:hq:SKU, its held total. One script moves
// units between the stock and the lines atomically. These are not
// luascript's hold keys: holds made by one strategy are not seen by the
// other.
//
// An order's record is a hash in one of 16 buckets, by a hash of its id:
// PREFIX{oB}:o:ID, beside the bucket's index of orders not done,
// PREFIX{oB}:oi, scored by when each falls due. On a Redis Cluster the
// buckets spread over the masters; an order's record and its index entry
// always share a slot, so each step on a record is one script. A done
// record expires after the key TTL. Every time is the Redis TIME of the
// server that holds the key.

//go:embed orders.lua
var ordersLua string

var ordersScript = rediskeys.NewScript(ordersLua)

var _ lockmgr.HoldStore = (*Store)(nil)

// orderBuckets is how many slots the order records spread over.
const orderBuckets = 16

// holdKeys returns the stock key of sku and its three hold keys.
func (s *Store) holdKeys(sku string) []string {
	stock := rediskeys.Stock(s.prefix, sku)
	base := strings.TrimSuffix(stock, ":s:"+sku) // PREFIX{tag}
	return []string{stock, base + ":hl:" + sku, base + ":hd:" + sku, base + ":hq:" + sku}
}

func bucket(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % orderBuckets)
}

// bucketBase is the prefix and hash tag of bucket b's keys.
func (s *Store) bucketBase(b int) string {
	return s.prefix + "{o" + strconv.FormatInt(int64(b), 16) + "}"
}

// orderKeys returns the record key of order id and its bucket's index.
func (s *Store) orderKeys(id string) []string {
	base := s.bucketBase(bucket(id))
	return []string{base + ":o:" + id, base + ":oi"}
}

// eval runs script; writes wait for the replicas WithReplicas asks for.
func (s *Store) eval(ctx context.Context, script *rediskeys.Script, write bool, keys []string, args ...any) (*redis.Cmd, error) {
	replicas := 0
	if write {
		replicas = s.replicas
	}
	cmd, acked, err := script.Run(ctx, s.client, replicas, s.replicaTimeout, keys, args...)
	if err == nil && write {
		err = s.checkReplicas(acked)
	}
	return cmd, err
}

// ReadHolds implements [lockmgr.HoldStore]: the stock of sku (its
// version), its held total and the ids of up to max of its lines whose
// expiry has passed, in one script.
func (s *Store) ReadHolds(ctx context.Context, sku string, max int) (stock, version, held int64, expired []string, err error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, 0, 0, nil, err
	}
	cmd, err := s.eval(ctx, s.script, false, s.holdKeys(sku), "read", max)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("redisstore: read holds of %q: %w", sku, err)
	}
	vals, err := cmd.StringSlice()
	switch {
	case err != nil:
		return 0, 0, 0, nil, fmt.Errorf("redisstore: read holds of %q: %w", sku, err)
	case len(vals) == 0:
		return 0, 0, 0, nil, fmt.Errorf("%w: %q", inventory.ErrNotFound, sku)
	}
	if stock, err = strconv.ParseInt(vals[0], 10, 64); err == nil {
		held, err = strconv.ParseInt(vals[1], 10, 64)
	}
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("redisstore: read holds of %q: %w", sku, err)
	}
	return stock, stock, held, vals[2:], nil
}

// Held implements [lockmgr.HoldStore].
func (s *Store) Held(ctx context.Context, sku string) (int64, error) {
	_, _, held, _, err := s.ReadHolds(ctx, sku, 0)
	return held, err
}

// Hold implements [lockmgr.HoldStore], in one script. A copy of a Hold
// that ran (go-redis sent it again) finds its line and reports
// [inventory.ErrDuplicate], as the Manager expects.
func (s *Store) Hold(ctx context.Context, sku string, version, newStock int64, id string, qty int64, expires time.Time) (bool, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return false, err
	}
	if newStock < 0 || newStock > inventory.MaxStock || qty < 1 || qty > inventory.MaxStock {
		return false, fmt.Errorf("%w: redisstore: hold %d leaving %d", inventory.ErrInvalidArgument, qty, newStock)
	}
	args := []any{"hold", version, newStock, id, qty, expires.UnixMilli()}
	if s.ledgerOn {
		args = s.entryArgs(ctx, args, lockmgr.Note{Kind: ledger.Reserve, Hold: id})
	}
	cmd, err := s.eval(ctx, s.script, true, s.holdKeys(sku), args...)
	if err != nil {
		return false, fmt.Errorf("redisstore: hold %q for %q: %w", sku, id, err)
	}
	switch n, _ := cmd.Int64(); n {
	case -1:
		return false, fmt.Errorf("%w: redisstore: %q is held for %q already", inventory.ErrDuplicate, sku, id)
	case 1:
		return true, nil
	}
	return false, nil
}

// Unhold implements [lockmgr.HoldStore], in one script.
func (s *Store) Unhold(ctx context.Context, sku, id string, sold bool) (int64, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return 0, err
	}
	flag := "0"
	if sold {
		flag = "1"
	}
	args := []any{"unhold", id, flag, inventory.MaxStock}
	if s.ledgerOn {
		def := lockmgr.Note{Kind: ledger.Cancel, Hold: id}
		if sold {
			def.Kind = ledger.Confirm
		}
		args = s.entryArgs(ctx, args, def)
	}
	cmd, err := s.eval(ctx, s.script, true, s.holdKeys(sku), args...)
	if err != nil {
		return 0, fmt.Errorf("redisstore: unhold %q for %q: %w", sku, id, err)
	}
	n, err := cmd.Int64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: unhold %q for %q: %w", sku, id, err)
	}
	return n, nil
}

// CreateOrder implements [lockmgr.HoldStore].
func (s *Store) CreateOrder(ctx context.Context, id string, lines []inventory.Line, ttl, grace time.Duration) (lockmgr.Order, error) {
	if err := validateOrderID(id); err != nil {
		return lockmgr.Order{}, err
	}
	js, err := json.Marshal(lines)
	if err != nil {
		return lockmgr.Order{}, fmt.Errorf("redisstore: create order %q: %w", id, err)
	}
	o, _, err := s.order(ctx, "create", id, true, string(js), ttl.Milliseconds(), grace.Milliseconds())
	if err != nil {
		return lockmgr.Order{}, fmt.Errorf("redisstore: create order %q: %w", id, err)
	}
	return o, nil
}

// Order implements [lockmgr.HoldStore].
func (s *Store) Order(ctx context.Context, id string) (lockmgr.Order, error) {
	if err := validateOrderID(id); err != nil {
		return lockmgr.Order{}, err
	}
	o, _, err := s.order(ctx, "get", id, false)
	if err != nil {
		return lockmgr.Order{}, fmt.Errorf("redisstore: order %q: %w", id, err)
	}
	return o, nil
}

// UpdateOrder implements [lockmgr.HoldStore], each step in one script.
func (s *Store) UpdateOrder(ctx context.Context, id string, step lockmgr.OrderStep) (lockmgr.Order, bool, error) {
	if err := validateOrderID(id); err != nil {
		return lockmgr.Order{}, false, err
	}
	o, changed, err := s.order(ctx, "step", id, true, string(step), s.keyTTL.Milliseconds())
	if err != nil {
		return lockmgr.Order{}, false, fmt.Errorf("redisstore: order %q: %s: %w", id, step, err)
	}
	return o, changed, nil
}

// order runs orders.lua's op on the record of id and decodes its reply.
func (s *Store) order(ctx context.Context, op, id string, write bool, args ...any) (lockmgr.Order, bool, error) {
	cmd, err := s.eval(ctx, ordersScript, write, s.orderKeys(id), append([]any{op, id}, args...)...)
	if err != nil {
		return lockmgr.Order{}, false, err
	}
	if n, err := cmd.Int64(); err == nil {
		if n == -1 {
			return lockmgr.Order{}, false, fmt.Errorf("%w: the order exists", inventory.ErrDuplicate)
		}
		return lockmgr.Order{}, false, fmt.Errorf("%w: no such order", inventory.ErrNotFound)
	}
	r, err := cmd.Slice()
	if err != nil || len(r) != 7 {
		return lockmgr.Order{}, false, fmt.Errorf("unexpected reply %v: %w", cmd.Val(), err)
	}
	state, _ := r[1].(string)
	exp, _ := r[2].(int64)
	complete, _ := r[3].(int64)
	done, _ := r[4].(int64)
	js, _ := r[5].(string)
	changed, _ := r[6].(int64)
	o := lockmgr.Order{ID: id, State: lockmgr.OrderState(state), Expires: time.UnixMilli(exp),
		Complete: complete == 1, Done: done == 1}
	if err := json.Unmarshal([]byte(js), &o.Lines); err != nil {
		return lockmgr.Order{}, false, fmt.Errorf("lines %q: %w", js, err)
	}
	return o, changed == 1, nil
}

// ExpiredOrders implements [lockmgr.HoldStore]: it reads every bucket's
// index and returns the max earliest due.
func (s *Store) ExpiredOrders(ctx context.Context, max int) ([]string, error) {
	type due struct {
		id string
		at float64
	}
	var all []due
	for b := range orderBuckets {
		base := s.bucketBase(b)
		cmd, err := s.eval(ctx, ordersScript, false, []string{base + ":o:", base + ":oi"}, "due", "", max)
		if err != nil {
			return nil, fmt.Errorf("redisstore: expired orders: %w", err)
		}
		vals, err := cmd.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("redisstore: expired orders: %w", err)
		}
		for i := 0; i+1 < len(vals); i += 2 {
			at, _ := strconv.ParseFloat(vals[i+1], 64)
			all = append(all, due{vals[i], at})
		}
	}
	slices.SortStableFunc(all, func(a, b due) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	ids := make([]string, 0, min(max, len(all)))
	for _, d := range all[:min(max, len(all))] {
		ids = append(ids, d.id)
	}
	return ids, nil
}

// validateOrderID checks an order id: 1..MaxOrderIDLen bytes of UTF-8
// without control characters.
func validateOrderID(id string) error {
	ok := id != "" && len(id) <= lockmgr.MaxOrderIDLen && utf8.ValidString(id)
	for _, r := range id {
		ok = ok && !unicode.IsControl(r)
	}
	if !ok {
		return fmt.Errorf("%w: redisstore: order id %q: want 1..%d bytes of UTF-8 without control characters",
			inventory.ErrInvalidArgument, id, lockmgr.MaxOrderIDLen)
	}
	return nil
}
