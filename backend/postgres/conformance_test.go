package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/internal/testserver"
)

// freshSchema returns the shared server's URL and a new schema name that
// is dropped (with everything in it) in t.Cleanup.
func freshSchema(t testing.TB) (string, string) {
	t.Helper()
	u := testserver.PostgresURL(t)
	schema := "lh_test_" + backend.NewNonce().String()[:16]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, fmt.Sprintf(`DROP SCHEMA IF EXISTS %s CASCADE`, schema)); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return u, schema
}

// openTest opens a backend in a fresh schema; the caller (or the suite)
// closes it.
func openTest(t testing.TB, opts ...Option) *Backend {
	t.Helper()
	u, schema := freshSchema(t)
	b, err := Open(context.Background(), u, append([]Option{WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b
}

// want is what the backend declares against a server with fsync and
// synchronous_commit on (the machine's service and testserver.Postgres).
var want = backend.Capabilities{
	Name:           "postgres",
	ServerClock:    true,
	SafeFencing:    true,
	DurableFencing: true,
	PushEvents:     true,
	MultiProcess:   true,
	MinTTL:         time.Millisecond,
}

// TestConformance runs the shared suite, each New in its own schema.
// Reopen closes the pool and opens a new one on the same schema, as a
// restarted process would; TestRestartKeepsTokens restarts the server.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:      func(t testing.TB) backend.Leases { return openTest(t) },
		Want:     want,
		Parallel: true, // each New is a schema of its own; Reopen opens a new pool on it
		Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
			pb := old.(*Backend)
			u := testserver.PostgresURL(t)
			if err := pb.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			b, err := Open(context.Background(), u, WithSchema(pb.Schema()))
			if err != nil {
				t.Fatalf("reopen schema %s: %v", pb.Schema(), err)
			}
			return b
		},
	})
}
