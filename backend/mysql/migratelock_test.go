package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestOpenUpToDateTakesNoMigrationLock (issue 27 item 7): GET_LOCK names
// are server-wide and any user can take another tenant's migration lock
// name. Holding it blocked every open of that tenant — not only its first
// migration — for up to 60 s. An open of a database whose tables are at
// the current version must not wait for it.
func TestOpenUpToDateTakesNoMigrationLock(t *testing.T) {
	adminURL := testserver.MySQLURL(t)
	ctx := context.Background()
	urlB, dbB := confinedUser(t, adminURL, "b")
	b, err := Open(ctx, urlB)
	if err != nil {
		t.Fatalf("first open (migrates): %v", err)
	}
	prefix := b.prefix
	b.Close()

	cfg, err := ParseURL(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got int
	if err := holder.QueryRowContext(ctx, `SELECT GET_LOCK(?, 5)`, "leasehold migrate "+dbB+"."+prefix).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK of B's migration lock: %d, %v", got, err)
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err = Open(octx, urlB)
	if err != nil {
		t.Fatalf("open of up-to-date tables while another session holds their migration lock: %v", err)
	}
	b.Close()
}
