package mysql

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestAccessDeniedIsRefused: a user who may read (and create) the
// backend's tables but not write them gets "command denied" (error 1142),
// which is backend.ErrRefused and ErrNotApplied; the Locker reports it at
// once, not as an unknown outcome.
func TestAccessDeniedIsRefused(t *testing.T) {
	owner, u := openTest(t)
	defer owner.Close()
	db := u[strings.LastIndex(u, "/")+1:]
	if i := strings.IndexByte(db, '?'); i >= 0 {
		db = db[:i]
	}
	user := "lh_ro_" + backend.NewNonce().String()[:10]
	testserver.MySQLExec(t, u, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'ro-pw-0123456789'")
	t.Cleanup(func() { testserver.MySQLExec(t, u, "DROP USER IF EXISTS '"+user+"'@'%'") })
	testserver.MySQLExec(t, u, "GRANT SELECT, CREATE ON "+db+".* TO '"+user+"'@'%'")
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.User = url.UserPassword(user, "ro-pw-0123456789")
	ctx := context.Background()
	b, err := Open(ctx, pu.String())
	if err != nil {
		t.Fatalf("Open as a read-only user: %v", err)
	}
	defer b.Close()
	_, err = b.Acquire(ctx, "k", backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Minute)
	if !errors.Is(err, backend.ErrRefused) || !errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("Acquire as a read-only user: %v, want ErrRefused and ErrNotApplied", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := lk.Acquire(actx, "jobs/x"); !errors.Is(err, leasehold.ErrRefused) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Locker.Acquire as a read-only user: %v, want ErrRefused at once", err)
	}
}
