package main

import (
	"context"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"; or go-sql-driver/mysql, or modernc.org/sqlite
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

func main() {
	ctx := context.Background()
	db, err := sqlx.Open("pgx", "postgres://app@db/shop") // or "mysql", or "sqlite"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(32) // below the server's connection limit

	tables, err := sqlstore.New(db) // sqlstore.WithSchema for your own table
	if err != nil {
		log.Fatal(err)
	}
	if err := tables.CreateTables(ctx); err != nil { // once: the stock table, the key ledger and the holds tables
		log.Fatal(err)
	}

	stock, err := rowlock.New(db) // optimistic.New(db) is the same call
	if err != nil {
		log.Fatal(err)
	}
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
}
