package mysql_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/mysql"
)

// Open makes the backend its own connection pool from a URL.
func ExampleOpen() {
	ctx := context.Background()
	b, err := mysql.Open(ctx, "mysql://app@db.example:3306/app?tls=true")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := lk.TryAcquire(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err) // leasehold.ErrLockNotAcquired when another instance holds it
	}
	defer l.Release(ctx)
}

// An application that already has a *sql.DB gives it to New, provided its
// DSN sets what the backend needs (New checks, and refuses with
// mysql.ErrSessionUnsuitable otherwise); the backend's Close leaves db open.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app@tcp(db.example:3306)/app?tls=true&parseTime=true&loc=UTC&clientFoundRows=true&time_zone=%27%2B00%3A00%27")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	b, err := mysql.New(ctx, db)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
}
