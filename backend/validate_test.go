package backend_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func TestCheckClaimMaxLate(t *testing.T) {
	req := backend.ClaimRequest{
		Job: "j", ScheduledAt: time.Now(), Owner: backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, TTL: time.Minute,
	}
	for _, late := range []time.Duration{0, time.Nanosecond, time.Hour} {
		req.MaxLate = late
		if err := backend.CheckClaim(req, time.Millisecond); err != nil {
			t.Errorf("MaxLate %v: %v, want accepted", late, err)
		}
	}
	req.MaxLate = -1500 * time.Millisecond
	err := backend.CheckClaim(req, time.Millisecond)
	if !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("MaxLate -1.5s: got %v, want ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), "max late") || !strings.Contains(err.Error(), "-1.5s") {
		t.Errorf("error %q does not name the field max late and the value -1.5s", err)
	}
}
