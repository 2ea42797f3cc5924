package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// TestPermissionDeniedIsRefused: a role that may read the backend's tables
// but not write them gets "permission denied" (SQLSTATE 42501), which is
// backend.ErrRefused and ErrNotApplied (the statement did not run); the
// Locker reports it at once, not as an unknown outcome.
func TestPermissionDeniedIsRefused(t *testing.T) {
	u, schema := freshSchema(t)
	ctx := context.Background()
	owner, err := Open(ctx, u, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	role := "lh_ro_" + backend.NewNonce().String()[:12]
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'ro-pw-0123456789'`, role),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, schema, role),
		fmt.Sprintf(`GRANT SELECT ON ALL TABLES IN SCHEMA %s TO %s`, schema, role),
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s`, role))
		_, _ = c.Exec(context.Background(), fmt.Sprintf(`DROP ROLE %s`, role))
	})
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.User = url.UserPassword(role, "ro-pw-0123456789")
	b, err := Open(ctx, pu.String(), WithSchema(schema))
	if err != nil {
		t.Fatalf("Open as a read-only role: %v", err)
	}
	defer b.Close()
	_, err = b.Acquire(ctx, "k", backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Minute)
	if !errors.Is(err, backend.ErrRefused) || !errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("Acquire as a read-only role: %v, want ErrRefused and ErrNotApplied", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := lk.Acquire(actx, "jobs/x"); !errors.Is(err, leasehold.ErrRefused) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Locker.Acquire as a read-only role: %v, want ErrRefused at once", err)
	}
}
