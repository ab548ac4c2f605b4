package main

import (
	"context"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"; or go-sql-driver/mysql, or modernc.org/sqlite
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/optimistic"
)

func main() {
	ctx := context.Background()
	db, err := sqlx.Open("pgx", "postgres://app@db/shop") // or "mysql", or "sqlite"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	stock, err := optimistic.New(db, optimistic.WithLedger()) // rowlock.WithLedger() likewise
	if err != nil {
		log.Fatal(err)
	}
	if err := stock.CreateTables(ctx); err != nil { // once: the tables, the ledger's included
		log.Fatal(err)
	}
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	if _, err := stock.Reduce(ctx, "sneaker-42", 2,
		inventory.WithKey("buyer-7"), inventory.WithRef("order 1042")); err != nil {
		log.Fatal(err)
	}

	for e, err := range ledger.History(ctx, stock, "sneaker-42", 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Pos, e.Kind, e.Units, e.After.Available, e.Ref, e.Time)
	}
	if _, err := ledger.Check(ctx, stock, stock, "sneaker-42"); err != nil { // replays to Get and Held
		log.Fatal(err)
	}
}
