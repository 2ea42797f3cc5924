package postgres_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/postgres"
)

// A job writes its side effect in the same database, fenced by its lock's
// token: if the lock was lost and someone else holds it now, the write is
// rolled back instead of racing the new holder.
func ExampleBackend_Fence() {
	ctx := context.Background()
	b, err := postgres.Open(ctx, "postgres://app@db.example/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	err = lk.Do(ctx, "billing/close-day", func(ctx context.Context, token leasehold.Token) error {
		return pgx.BeginFunc(ctx, b.Pool(), func(tx pgx.Tx) error {
			key := leasehold.LockKey(lk.Namespace(), "billing/close-day")
			if err := b.Fence(ctx, tx, key, uint64(token)); err != nil {
				return err // postgres.ErrLeaseFenced: a newer holder exists; nothing is written
			}
			_, err := tx.Exec(ctx, `UPDATE ledger SET closed = true WHERE day = current_date`)
			return err
		})
	})
	if errors.Is(err, postgres.ErrLeaseFenced) {
		log.Print("lost the lock before writing; the new holder does it")
	}
}

// An application that already has a pgx pool gives it to New; the backend's
// Close leaves the pool open. Wait (used by Locker.Acquire) takes one
// connection out of the pool for LISTEN while anyone waits.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.example/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.New(ctx, pool, postgres.WithSchema("leasehold"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := lk.Acquire(ctx, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
}
