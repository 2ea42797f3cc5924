package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestOpenUpToDateTakesNoMigrationLock (issue 27 item 7): the migration
// lock is an advisory lock, database-wide, whose key any role can compute
// from another tenant's schema name. Holding it blocked every open of that
// tenant — not only its first migration — for the whole timeout. An open
// of a schema already at the current version must not wait for it.
func TestOpenUpToDateTakesNoMigrationLock(t *testing.T) {
	adminURL := testserver.PostgresURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	urlB, schemaB := confinedRole(t, admin, adminURL, "b")
	b, err := Open(ctx, urlB, WithSchema(schemaB))
	if err != nil {
		t.Fatalf("first open (migrates): %v", err)
	}
	b.Close()

	// Another session holds B's migration lock.
	holder, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(hashtext('leasehold migrate ' || $1))`, schemaB+"."); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err = Open(octx, urlB, WithSchema(schemaB))
	if err != nil {
		t.Fatalf("open of an up-to-date schema while another session holds its migration lock: %v", err)
	}
	b.Close()
}
