package mysql

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/nsrecipe"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// confinedUser creates a database and a user with the grants of
// docs/namespaces.md (MySQL) on it only; both are dropped in t.Cleanup. It
// returns the URL to connect as the user to its database, and the database.
func confinedUser(t *testing.T, adminURL, name string) (string, string) {
	t.Helper()
	suffix := backend.NewNonce().String()[:12]
	db, user, password := "lh_"+name+"_"+suffix, "lh_"+name+"_"+suffix, backend.NewNonce().String()
	// The recipe of docs/namespaces.md (MySQL), as printed there, with
	// its tenant's names and password replaced.
	stmts, err := nsrecipe.SQLStatements("MySQL", strings.NewReplacer("leasehold_a", db, "app_a", user, "A-LONG-RANDOM-PASSWORD", password))
	if err != nil {
		t.Fatal(err)
	}
	testserver.MySQLExec(t, adminURL, stmts...)
	t.Cleanup(func() {
		testserver.MySQLExec(t, adminURL, "DROP DATABASE IF EXISTS "+db, fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user))
	})
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	u.Path = "/" + db
	return u.String(), db
}

// isDenied reports whether err is an access-denied error from the server
// (1044 database, 1142 table, 1045 login).
func isDenied(err error) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && (me.Number == 1044 || me.Number == 1142 || me.Number == 1045)
}

// TestNamespaceConfinedByGrants: a user granted rights on database A only
// locks and claims in A, and the server refuses it database B.
func TestNamespaceConfinedByGrants(t *testing.T) {
	adminURL := testserver.MySQLURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	urlA, _ := confinedUser(t, adminURL, "a")
	urlB, dbB := confinedUser(t, adminURL, "b")

	bB, err := Open(ctx, urlB)
	if err != nil {
		t.Fatalf("Open as B in B: %v", err)
	}
	defer bB.Close()
	lkB, err := leasehold.NewLocker(bB, leasehold.WithNamespace("b"))
	if err != nil {
		t.Fatal(err)
	}
	lB, err := lkB.TryAcquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer lB.Release(ctx)

	bA, err := Open(ctx, urlA)
	if err != nil {
		t.Fatalf("Open as A in A: %v", err)
	}
	defer bA.Close()
	lkA, err := leasehold.NewLocker(bA, leasehold.WithNamespace("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lkA.Do(ctx, "orders", func(context.Context, leasehold.Token) error { return nil }); err != nil {
		t.Fatalf("A locks in A: %v", err)
	}
	c, err := schedule.ClaimOccurrence(ctx, bA, "report", time.Now().Add(-time.Second), schedule.ClaimOptions{Instance: "a"})
	if err != nil {
		t.Fatalf("A claims in A: %v", err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatalf("A finishes in A: %v", err)
	}

	// A in B: refused by the server.
	i := strings.LastIndex(urlA, "/")
	if _, err := Open(ctx, urlA[:i+1]+dbB); !isDenied(err) {
		t.Fatalf("Open of database B as A: %v, want access denied", err)
	}
	db := bA.DB()
	for _, q := range []string{
		"SELECT COUNT(*) FROM " + dbB + "." + bB.tLeases,
		"DELETE FROM " + dbB + "." + bB.tLeases,
		"CREATE TABLE " + dbB + ".intruder (x INT)",
		"CREATE DATABASE lh_intruder",
	} {
		if _, err := db.ExecContext(ctx, q); !isDenied(err) {
			t.Errorf("%s as A: %v, want access denied", q, err)
		}
	}
	// A's connections with B's tables (as if Open had let it through):
	// every operation on B's leases and runs is refused by the server.
	intruder := newBackend(bA.DB(), false, dbB, dbB+"`.`"+bB.prefix)
	nsrecipe.CheckConfined(t, bB, intruder, leasehold.LockKey("b", "billing/nightly"), "b:billing/nightly", isDenied)
	if l, err := bB.Get(ctx, leasehold.LockKey("b", "orders")); err != nil || l.Token != uint64(lB.Token()) {
		t.Fatalf("B's lease after A's attempts: %+v, %v", l, err)
	}
}
