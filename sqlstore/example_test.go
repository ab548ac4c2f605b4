package sqlstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/sqlstore"
)

// The read and compare-and-set that the lock strategies perform while they
// hold a SKU's lock.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "store")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlx.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	s, err := sqlstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}
	if err := s.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}

	stock, version, err := s.Read(ctx, "sneaker-42")
	if err != nil {
		log.Fatal(err)
	}
	ok, err := s.CompareAndSet(ctx, "sneaker-42", version, stock-3, inventory.DirReduce, "order-1")
	fmt.Println(ok, err)
	left, found, err := s.Seen(ctx, "sneaker-42", inventory.DirReduce, "order-1")
	fmt.Println(left, found, err)
	ok, err = s.CompareAndSet(ctx, "sneaker-42", version, stock-3, inventory.DirReduce, "")
	fmt.Println(ok, err, "(the version moved on)")
	// Output:
	// true <nil>
	// 7 true <nil>
	// false <nil> (the version moved on)
}
