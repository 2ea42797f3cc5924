package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestRenewPastItsValidityIsNotLost: every node renews the lease, but the
// replies come back after the renewed TTL (its validity) has passed. The
// Renew cannot report the lease renewed, yet no node said it was gone:
// ErrLeaseLost would be a guess (the owner then releases a lease "lost",
// and the Locker skips the clean-up it owes an unknown outcome). The
// outcome is unknown: an error matching neither ErrLeaseLost nor
// ErrNotApplied.
func TestRenewPastItsValidityIsNotLost(t *testing.T) {
	b, ps, _ := proxiedBackend(t, 3, WithNodeTimeout(5*time.Second))
	ctx := context.Background()
	owner := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", owner, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.SetDelay(400 * time.Millisecond)
	}
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: owner, Token: g.Token, TTL: 100 * time.Millisecond})
	for _, p := range ps {
		p.SetDelay(0)
	}
	if err == nil {
		t.Fatal("Renew answered by every node 400 ms after it was sent reported a 100 ms lease renewed")
	}
	if errors.Is(err, backend.ErrLeaseLost) || errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("Renew renewed on every node, replies past its validity: %v; want an unknown outcome (neither ErrLeaseLost nor ErrNotApplied)", err)
	}
	if !strings.Contains(err.Error(), "renewed on 3 of 3 nodes") || !strings.Contains(err.Error(), "past the validity") {
		t.Fatalf("Renew: %v; want the answer of a quorum that renewed past its validity (every node renewed)", err)
	}
}
