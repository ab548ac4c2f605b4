package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/zklock"
)

// A flash sale: a thousand buyers race for ten units, each buyer's id as its
// idempotency key. Exactly ten buy. The reference in-memory manager stands
// in here for a real strategy, which is one constructor call away (see
// ExampleStockManager_strategies).
func Example() {
	ctx := context.Background()
	var stock inventory.StockManager = inventorytest.NewMemory(0)
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}

	var sold, soldOut atomic.Int64
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			buyer := fmt.Sprintf("buyer-%d", i)
			_, err := stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey(buyer))
			switch {
			case err == nil:
				sold.Add(1)
			case errors.Is(err, inventory.ErrInsufficientStock):
				soldOut.Add(1)
			default:
				log.Print(err) // a real backend can fail: nothing was taken
			}
		})
	}
	wg.Wait()

	left, err := stock.Get(ctx, "sneaker-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sold:", sold.Load(), "sold out:", soldOut.Load(), "left:", left)
	// Output:
	// sold: 10 sold out: 990 left: 0
}

// Every strategy is one constructor call; the rest of a service sees only
// inventory.StockManager, so swapping strategy changes one line.
func ExampleStockManager_strategies() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or a ClusterClient
	db := sqlx.MustOpen("sqlite", "file:stock.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")

	// The SQL strategies and the SQL store share one table layout; create
	// it once (or point WithSchema at your own products table).
	sqlStore, err := sqlstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := sqlStore.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}

	var stock inventory.StockManager
	switch os.Getenv("STOCK_STRATEGY") { // configuration picks the strategy
	default: // luascript: one Lua script in Redis
		stock, err = luascript.New(rdb)
	case "optimistic": // version compare-and-set on the SQL row
		stock, err = optimistic.New(db)
	case "rowlock": // SELECT ... FOR UPDATE
		stock, err = rowlock.New(db)
	case "redislock": // a Redis lock around a store in Redis (or SQL)
		var store *redisstore.Store
		if store, err = redisstore.New(rdb); err == nil {
			stock, err = redislock.New(rdb, store)
		}
	case "redlock": // a lock on a majority of independent Redis servers
		nodes := []redis.UniversalClient{
			redis.NewClient(&redis.Options{Addr: "127.0.0.1:6380"}),
			redis.NewClient(&redis.Options{Addr: "127.0.0.1:6381"}),
			redis.NewClient(&redis.Options{Addr: "127.0.0.1:6382"}),
		}
		stock, err = redlock.New(nodes, sqlStore) // the stock in SQL this time
	case "zklock": // a ZooKeeper lock
		conn, events, zerr := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
		if zerr != nil {
			log.Fatal(zerr)
		}
		stock, err = zklock.New(conn, sqlStore, zklock.WithSessionEvents(events))
	}
	if err != nil {
		log.Fatal(err)
	}

	if err := stock.Init(ctx, "sneaker-42", 100); err != nil {
		log.Fatal(err)
	}
	left, err := stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("order-1001"))
	fmt.Println(left, err)
}

// Reduce tells apart every outcome; test them with errors.Is.
func ExampleStockManager_Reduce() {
	ctx := context.Background()
	stock := inventorytest.NewMemory(0)
	_ = stock.Init(ctx, "hoodie", 2)

	for _, qty := range []int64{1, 5, 0} {
		left, err := stock.Reduce(ctx, "hoodie", qty)
		switch {
		case err == nil:
			fmt.Printf("took %d, %d left\n", qty, left)
		case errors.Is(err, inventory.ErrInsufficientStock):
			fmt.Printf("asked %d: sold out, %d left, nothing taken\n", qty, left)
		case errors.Is(err, inventory.ErrInvalidArgument):
			fmt.Printf("asked %d: refused before any I/O\n", qty)
		case errors.Is(err, inventory.ErrContention):
			fmt.Println("the strategy gave up under contention; nothing taken; try again")
		case errors.Is(err, inventory.ErrNotFound):
			fmt.Println("no such SKU")
		default:
			fmt.Println("the backend failed; nothing taken; retry with the same key:", err)
		}
	}
	_, err := stock.Reduce(ctx, "cap", 1)
	fmt.Println(errors.Is(err, inventory.ErrNotFound))
	// Output:
	// took 1, 1 left
	// asked 5: sold out, 1 left, nothing taken
	// asked 0: refused before any I/O
	// true
}

// A client that timed out cannot know whether its Reduce took effect. It
// repeats the call with the same key: the call takes effect once, and the
// repeat reports ErrDuplicate with the first call's result.
func ExampleWithKey() {
	ctx := context.Background()
	stock := inventorytest.NewMemory(0)
	_ = stock.Init(ctx, "sneaker-42", 10)

	for range 3 { // say the first answer was lost, and the client retried twice
		left, err := stock.Reduce(ctx, "sneaker-42", 2, inventory.WithKey("order-1001"))
		switch {
		case errors.Is(err, inventory.ErrDuplicate):
			fmt.Println("already done; left then:", left)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("done; left:", left)
		}
	}
	left, _ := stock.Get(ctx, "sneaker-42")
	fmt.Println("stock:", left)
	// Output:
	// done; left: 8
	// already done; left then: 8
	// already done; left then: 8
	// stock: 8
}

// A checkout: the cart's units are held while the buyer pays. Confirm sells
// them; a buyer who never pays gets them released when the hold's TTL
// passes, with no caller action; Cancel gives them back at once.
func ExampleOrderManager() {
	ctx := context.Background()
	shop := inventorytest.NewMemory(0) // a StockManager and an OrderManager
	_ = shop.Init(ctx, "sneaker-42", 5)
	_ = shop.Init(ctx, "socks", 10)
	cart := []inventory.Line{{SKU: "sneaker-42", Qty: 1}, {SKU: "socks", Qty: 2}}

	show := func(when string) {
		avail, _ := shop.Get(ctx, "sneaker-42")
		held, _ := shop.Held(ctx, "sneaker-42")
		fmt.Printf("%-16s sneakers available %d, held %d\n", when, avail, held)
	}
	if err := shop.Reserve(ctx, "order-1001", cart, 15*time.Minute); err != nil {
		log.Fatal(err)
	}
	show("reserved:")
	if err := shop.Confirm(ctx, "order-1001"); err != nil {
		log.Fatal(err)
	}
	show("paid:")
	fmt.Println("cancel a paid order:", errors.Is(shop.Cancel(ctx, "order-1001"), inventory.ErrHoldConfirmed))

	// A buyer who walks away.
	_ = shop.Reserve(ctx, "order-1002", cart, 10*time.Millisecond)
	show("reserved again:")
	time.Sleep(50 * time.Millisecond)
	fmt.Println("pay too late:", errors.Is(shop.Confirm(ctx, "order-1002"), inventory.ErrHoldReleased))
	show("expired:")
	fmt.Println("cancel after expiry:", shop.Cancel(ctx, "order-1002")) // idempotent
	// Output:
	// reserved:        sneakers available 4, held 1
	// paid:            sneakers available 4, held 0
	// cancel a paid order: true
	// reserved again:  sneakers available 3, held 1
	// pay too late: true
	// expired:         sneakers available 4, held 0
	// cancel after expiry: <nil>
}

// A cart is taken whole or not at all; the error names the lines that did
// not fit.
func ExampleInsufficientError() {
	ctx := context.Background()
	shop := inventorytest.NewMemory(0)
	_ = shop.Init(ctx, "sneaker-42", 5)
	_ = shop.Init(ctx, "socks", 1)

	err := shop.ReduceLines(ctx, []inventory.Line{{SKU: "sneaker-42", Qty: 1}, {SKU: "socks", Qty: 3}})
	var short *inventory.InsufficientError
	if errors.As(err, &short) {
		for _, s := range short.Short {
			fmt.Printf("%s: asked %d, %d available\n", s.SKU, s.Qty, s.Available)
		}
	}
	fmt.Println(errors.Is(err, inventory.ErrInsufficientStock))
	left, _ := shop.Get(ctx, "sneaker-42")
	fmt.Println("sneakers left:", left) // nothing was taken
	// Output:
	// socks: asked 3, 1 available
	// true
	// sneakers left: 5
}

// Holds of SKUs nobody touches again are released by Sweep; Reap runs it in
// the background until its ctx is cancelled.
func ExampleReap() {
	ctx, stop := context.WithCancel(context.Background())
	shop := inventorytest.NewMemory(0)
	_ = shop.Init(ctx, "sneaker-42", 5)
	_ = shop.Reserve(ctx, "order-1003", []inventory.Line{{SKU: "sneaker-42", Qty: 2}}, 10*time.Millisecond)

	done := make(chan error, 1)
	go func() {
		done <- inventory.Reap(ctx, shop, 5*time.Millisecond, func(err error) { log.Print("sweep: ", err) })
	}()
	for held := int64(-1); held != 0; {
		time.Sleep(5 * time.Millisecond)
		held, _ = shop.Held(ctx, "sneaker-42")
	}
	avail, _ := shop.Get(ctx, "sneaker-42")
	fmt.Println("released without traffic; available:", avail)
	stop()
	fmt.Println(<-done)
	// Output:
	// released without traffic; available: 5
	// context canceled
}
