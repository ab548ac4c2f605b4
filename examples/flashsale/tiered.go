package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/tiered"
)

// tieredResult is a tiered row's part of the report: who sold the units
// (Redis, or SQL alone while Redis was down) and what Reconcile found after
// the sale, once the journal was drained.
type tieredResult struct {
	// KilledAt is the units sold when the row's private Redis was killed
	// (-kill-redis-at), or -1.
	KilledAt int64 `json:"killed_at"`
	// RedisSold is the units Redis sold (synced to SQL); FallbackSold the
	// units SQL sold alone while the circuit to Redis was open.
	RedisSold    int64 `json:"redis_sold"`
	FallbackSold int64 `json:"fallback_sold"`
	// Fallbacks is the calls SQL served alone.
	Fallbacks int64 `json:"fallbacks"`
	// Pool and Allotment are SQL's unallotted units and Redis's allotment
	// after the sale, as Reconcile found them (before its repairs).
	Pool      int64 `json:"pool"`
	Allotment int64 `json:"allotment"`
	// GrantsApplied counts the grants SQL had made that Redis had not
	// applied (a refill the kill cut), which Reconcile applied.
	GrantsApplied int64 `json:"grants_applied"`
	// Lost, Excess and Clean are Reconcile's drift for the SKU.
	Lost   int64 `json:"reconcile_lost"`
	Excess int64 `json:"reconcile_excess"`
	Clean  bool  `json:"reconcile_clean"`
}

// saleHooks is what runSale asks of a row that does more than sell: the
// tiered rows kill their Redis during the sale, and drain and reconcile
// after it.
type saleHooks interface {
	// during runs beside the sale until the returned stop is called.
	during(ctx context.Context, c *counts) (stop func())
	// after runs once the buying has ended, before the stock is read back.
	after(ctx context.Context, r *result) error
	// close releases what the row holds, and deletes what it wrote.
	close()
}

// tieredTarget is tiered over the Redis of -redis (a private redis-server
// with -kill-redis-at) and the SQL store sqlName.
func (b *backends) tieredTarget(sqlName string) target {
	cfg := b.cfg
	kill := cfg.killRedisAt > 0
	tg := target{strategy: "tiered", store: "redis+" + sqlName, keyless: kill}
	if kill {
		tg.where = fmt.Sprintf("private redis-server, SIGKILLed at %.0f%% of the stock sold, restarted from its AOF after the sale; %s", 100*cfg.killRedisAt, b.where(sqlName))
	} else {
		tg.where = b.where("redis") + "; " + b.where(sqlName)
		tg.embedded = b.embedded("redis")
	}
	tg.open = func(ctx context.Context) (inventory.StockManager, error) {
		db, err := b.sql(ctx, sqlName)
		if err != nil {
			return nil, err
		}
		row := &tieredRow{cfg: cfg, db: db, tag: b.tag(tg), killAt: cfg.killRedisAt, killedAt: -1}
		if kill {
			if row.proc, err = startRedis(ctx); err != nil {
				return nil, err
			}
			row.rdb = row.proc.client(cfg)
		} else if row.rdb, err = b.redis(ctx); err != nil {
			return nil, err
		}
		if row.m, err = row.manager(row.rdb); err != nil {
			row.close()
			return nil, err
		}
		if err := row.m.CreateTables(ctx); err != nil {
			row.close()
			return nil, fmt.Errorf("tiered: creating the tables: %w", err)
		}
		row.startSync()
		return row, nil
	}
	return tg
}

// tieredRow is a tiered.Manager with a syncer running beside the sale.
type tieredRow struct {
	cfg    *config
	db     *sqlx.DB
	rdb    redis.UniversalClient
	proc   *redisProc // the private Redis with -kill-redis-at, else nil
	tag    string     // the run's and row's tag, in every SKU, hold id and key it writes
	killAt float64

	m                  *tiered.Manager // replaced after a kill: see after
	fallbacks          int64           // of the managers replaced
	sku                string
	killedAt           int64
	stopSync, syncDone func()
}

var _ saleHooks = (*tieredRow)(nil)

// manager makes a tiered.Manager over rdb with the sale's settings: the
// defaults, but for keys and tables named after -prefix and, with
// -kill-redis-at, chunks of a tenth of the stock, so that SQL keeps units
// for the fallback to sell.
func (t *tieredRow) manager(rdb redis.UniversalClient) (*tiered.Manager, error) {
	opts := []tiered.Option{tiered.WithPrefix(t.cfg.prefix + ":tiered"), tiered.WithTablePrefix(t.cfg.prefix + "_tiered_"),
		tiered.WithKeyTTL(t.cfg.keyTTL)}
	if t.killAt > 0 {
		// Its private Redis (appendfsync always) restarts from its own
		// AOF, never older: reconcile it rather than fence it, which would
		// record the allotment it held as lost.
		opts = append(opts, tiered.WithChunk(max(1, t.cfg.stock/10)), tiered.WithTrustRestarts())
	}
	return tiered.New(rdb, t.db, opts...)
}

func (t *tieredRow) startSync() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	m := t.m
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	t.stopSync, t.syncDone = cancel, func() { <-done }
}

// Init sets the stock, and warms Redis up as before a sale.
func (t *tieredRow) Init(ctx context.Context, sku string, qty int64) error {
	t.sku = sku
	if err := t.m.Init(ctx, sku, qty); err != nil {
		return err
	}
	_, err := t.m.Warm(ctx, sku)
	return err
}

// Reduce implements inventory.StockManager.
func (t *tieredRow) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return t.m.Reduce(ctx, sku, qty, opts...)
}

// Return implements inventory.StockManager.
func (t *tieredRow) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return t.m.Return(ctx, sku, qty, opts...)
}

// Get implements inventory.StockManager.
func (t *tieredRow) Get(ctx context.Context, sku string) (int64, error) { return t.m.Get(ctx, sku) }

// The order calls (the -carts sale) go to the Manager as they are.

func (t *tieredRow) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return t.m.ReduceLines(ctx, lines, opts...)
}

func (t *tieredRow) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return t.m.ReturnLines(ctx, lines, opts...)
}

func (t *tieredRow) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return t.m.Reserve(ctx, id, lines, ttl)
}

func (t *tieredRow) Confirm(ctx context.Context, id string) error { return t.m.Confirm(ctx, id) }

func (t *tieredRow) Cancel(ctx context.Context, id string) error { return t.m.Cancel(ctx, id) }

func (t *tieredRow) Held(ctx context.Context, sku string) (int64, error) { return t.m.Held(ctx, sku) }

func (t *tieredRow) Sweep(ctx context.Context) (int, error) { return t.m.Sweep(ctx) }

var _ inventory.OrderManager = (*tieredRow)(nil)

// during kills the private Redis once killAt of the stock is sold.
func (t *tieredRow) during(ctx context.Context, c *counts) func() {
	if t.proc == nil {
		return func() {}
	}
	at := int64(math.Ceil(t.killAt * float64(t.cfg.stock)))
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if n := c.sold.Load(); n >= at {
					t.proc.kill()
					t.killedAt = n

					return
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// after stops the syncer; restarts a killed Redis from its AOF (with a new
// Manager: the old one's circuit may be open); drains the journal into
// SQL and reconciles the SKU.
func (t *tieredRow) after(ctx context.Context, r *result) error {
	t.stopSync()
	t.syncDone()
	if t.killedAt >= 0 {
		if err := t.proc.start(ctx); err != nil {
			return fmt.Errorf("restarting the private Redis: %w", err)
		}
		t.fallbacks += t.m.Fallbacks()
		_ = t.m.Close()
		_ = t.rdb.Close()
		t.rdb = t.proc.client(t.cfg)
		m, err := t.manager(t.rdb)
		if err != nil {
			return err
		}
		t.m = m
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := t.m.Drain(ctx); err != nil {
		return fmt.Errorf("draining the journal: %w", err)
	}
	drifts, err := t.m.Reconcile(ctx, t.sku)
	if err != nil || len(drifts) != 1 {
		return fmt.Errorf("reconciling: %d drifts, %w", len(drifts), err)
	}
	d := drifts[0]
	r.Tiered = &tieredResult{
		KilledAt: t.killedAt, RedisSold: d.Sold - d.Returned, FallbackSold: d.Direct, Fallbacks: t.fallbacks + t.m.Fallbacks(),
		Pool: d.Pool, Allotment: d.Allotment, GrantsApplied: d.GrantsApplied, Lost: d.Lost, Excess: d.Excess, Clean: d.Clean(),
	}
	return nil
}

// close stops the Manager and deletes the SKU's rows and keys (the private
// Redis goes with its directory).
func (t *tieredRow) close() {
	if t.stopSync != nil {
		t.stopSync()
		t.syncDone()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if t.m != nil {
		_ = t.m.Close()
	}
	if t.sku != "" {
		// Every SKU of the row (one in a sale, -skus in a cart sale), hold
		// id and idempotency key names the row's tag.
		like := "%" + t.tag + "%"
		for _, table := range []string{"stock", "grants", "synced", "keys"} {
			_, _ = t.db.ExecContext(ctx, t.db.Rebind("DELETE FROM "+t.cfg.prefix+"_tiered_"+table+" WHERE sku LIKE ?"), like)
		}
		if t.proc == nil {
			deleteKeys(ctx, t.rdb, t.cfg.prefix+":tiered*"+t.tag+"*")
			t.rdb.Del(ctx, t.cfg.prefix+":tiered:run") // the restart stamp: a Manager started next sets it again
			forgetMembers(ctx, t.rdb, t.cfg.prefix+":tiered*:x", "*"+t.tag+"*")
		}
	}
	if t.proc != nil {
		_ = t.rdb.Close()
		t.proc.stop()
	}
}

// forgetMembers removes the members that match member from the sorted
// sets that match pattern (the sweep indexes, shared by the rows), on every
// master of a Cluster; a set left empty goes with its last member.
func forgetMembers(ctx context.Context, client redis.UniversalClient, pattern, member string) {
	del := func(ctx context.Context, c redis.UniversalClient) error {
		keys := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for keys.Next(ctx) {
			var gone []any
			members := c.ZScan(ctx, keys.Val(), 0, member, 1000).Iterator()
			for members.Next(ctx) {
				gone = append(gone, members.Val())
				members.Next(ctx) // the score
			}
			if len(gone) > 0 {
				c.ZRem(ctx, keys.Val(), gone...)
			}
		}
		return keys.Err()
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	} else {
		_ = del(ctx, client)
	}
}
