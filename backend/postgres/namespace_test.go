package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/nsrecipe"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// confinedRole creates, as the superuser of the test server, a LOGIN role
// that owns one new schema and has no other rights (docs/namespaces.md,
// PostgreSQL). It returns the URL to connect as the role and the schema.
// Both are dropped in t.Cleanup.
func confinedRole(t *testing.T, admin *pgx.Conn, adminURL, name string) (string, string) {
	t.Helper()
	ctx := context.Background()
	role := "lh_" + name + "_" + backend.NewNonce().String()[:12]
	schema := role
	password := backend.NewNonce().String()
	// The recipe of docs/namespaces.md (PostgreSQL), as printed there,
	// with its tenant's names and password replaced.
	stmts, err := nsrecipe.SQLStatements("PostgreSQL", strings.NewReplacer("app_a", role, "lh_a", schema, "A-LONG-RANDOM-PASSWORD", password))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", strings.Replace(q, password, "…", 1), err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer c.Close(ctx)
		for _, q := range []string{`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`, `DROP OWNED BY ` + role, `DROP ROLE IF EXISTS ` + role} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Errorf("cleanup %s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return u.String(), schema
}

// withParam adds a query parameter to a URL.
func withParam(u, kv string) string {
	if strings.Contains(u, "?") {
		return u + "&" + kv
	}
	return u + "?" + kv
}

// isDenied reports whether err is PostgreSQL's insufficient_privilege.
func isDenied(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// TestNamespaceConfinedByRole: a role that owns schema A runs the whole
// conformance suite in A (a fresh table prefix per backend), and the server
// refuses it everything in schema B and creating schemas of its own.
func TestNamespaceConfinedByRole(t *testing.T) {
	adminURL := testserver.PostgresURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	urlA, schemaA := confinedRole(t, admin, adminURL, "a")
	urlB, schemaB := confinedRole(t, admin, adminURL, "b")

	var n atomic.Int64
	openA := func(t testing.TB, prefix string) *Backend {
		b, err := Open(context.Background(), urlA, WithSchema(schemaA), WithTablePrefix(prefix))
		if err != nil {
			t.Fatalf("Open as the role of schema A: %v", err)
		}
		return b
	}
	t.Run("conformance in A", func(t *testing.T) {
		conformance.Run(t, conformance.Harness{
			New:    func(t testing.TB) backend.Leases { return openA(t, fmt.Sprintf("t%d_", n.Add(1))) },
			Want:   want,
			NoWire: "TestConformance runs the wire checks on this backend; this run is about the namespace",
			Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
				p := old.(*Backend).prefix
				if err := old.Close(); err != nil {
					t.Fatal(err)
				}
				return openA(t, p)
			},
			// The process faults, with every process in A as A's role.
			Process: func(t testing.TB) faultkit.Kit {
				return faultKitAt(t, urlA, schemaA, fmt.Sprintf("t%d_", n.Add(1)))
			},
		})
	})

	// B's owner sets B up and uses it.
	bB, err := Open(ctx, urlB, WithSchema(schemaB))
	if err != nil {
		t.Fatalf("Open as the role of schema B: %v", err)
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

	// A, in A: a lock and a claimed, finished occurrence, through the URL
	// form the daemon uses.
	bA, err := Open(ctx, withParam(urlA, "schema="+schemaA))
	if err != nil {
		t.Fatalf("Open of %s?…&schema=%s as A: %v", schemaA, schemaA, err)
	}
	defer bA.Close()
	if bA.Schema() != schemaA {
		t.Fatalf("schema from the URL: %q, want %q", bA.Schema(), schemaA)
	}
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

	// A, in B: opening B's tables, reading or writing them, is refused by
	// the server.
	if _, err := Open(ctx, urlA, WithSchema(schemaB)); !isDenied(err) {
		t.Fatalf("Open of schema B as A: %v, want permission denied (42501)", err)
	}
	if _, err := Open(ctx, withParam(urlA, "schema="+schemaB)); !isDenied(err) {
		t.Fatalf("Open of …&schema=%s as A: %v, want permission denied (42501)", schemaB, err)
	}
	if _, err := Open(ctx, withParam(urlA, "schema=Bad-Name")); !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), "Bad-Name") {
		t.Fatalf("Open with a bad schema in the URL: %v, want ErrInvalid naming it", err)
	}
	connA, err := pgx.Connect(ctx, urlA)
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close(ctx)
	for _, q := range []string{
		`SELECT count(*) FROM ` + schemaB + `.leases`,
		`DELETE FROM ` + schemaB + `.leases`,
		`UPDATE ` + schemaB + `.runs SET state = 'abandoned'`,
		`CREATE TABLE ` + schemaB + `.intruder (x int)`,
		`CREATE SCHEMA lh_intruder`,
	} {
		if _, err := connA.Exec(ctx, q); !isDenied(err) {
			t.Errorf("%s as A: %v, want permission denied (42501)", q, err)
		}
	}
	// A's pool with B's table names (as if Open had let it through):
	// every operation on B's leases and runs is refused by the server.
	poolA, err := pgxpool.New(ctx, urlA)
	if err != nil {
		t.Fatal(err)
	}
	defer poolA.Close()
	intruder := layout(poolA, false, config{schema: schemaB})
	intruder.n = newNotifier(intruder)
	nsrecipe.CheckConfined(t, bB, intruder, leasehold.LockKey("b", "billing/nightly"), "b:billing/nightly", isDenied)

	// B's lock is untouched: still held, same token.
	if l, err := bB.Get(ctx, leasehold.LockKey("b", "orders")); err != nil || l.Token != uint64(lB.Token()) {
		t.Fatalf("B's lease after A's attempts: %+v, %v", l, err)
	}
}
