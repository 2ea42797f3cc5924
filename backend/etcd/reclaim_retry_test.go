package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestReclaimRetryAfterExpiryKeepsRun: a Reclaim retried by the
// occurrence's running owner after its runner's lease expired answers
// ErrLeaseLost together with the occurrence's Run; the guard returns a
// step's values with its error (a review of the guard found them dropped).
func TestReclaimRetryAfterExpiryKeepsRun(t *testing.T) {
	srv := testserver.Etcd(t)
	b := open(t, []string{srv.Addr()})
	ctx := context.Background()
	at := time.Now().Truncate(time.Second)
	req := backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, TTL: time.Second}
	if _, err := b.Claim(ctx, req); err != nil {
		t.Fatalf("claim: %v", err)
	}
	eventually.True(t, 30*time.Second, "the runner's lease expires", func() bool {
		r, err := b.GetRun(ctx, "j", at)
		return err == nil && r.Expired
	})
	_, r, err := b.Reclaim(ctx, req)
	if !errors.Is(err, backend.ErrLeaseLost) {
		t.Fatalf("Reclaim retried by the owner after expiry: %v; want ErrLeaseLost", err)
	}
	if r.Attempt != 1 || r.Job != "j" {
		t.Fatalf("Reclaim's run with ErrLeaseLost: %+v; want the occurrence's run (attempt 1)", r)
	}
}
