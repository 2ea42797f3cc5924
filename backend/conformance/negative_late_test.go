package conformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// lateIgnored drops MaxLate: every late claim goes through.
func lateIgnored(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			req.MaxLate = 0
			return next(ctx, req)
		},
	}
}

// lateFirst judges MaxLate before the occurrence's record, so a retry of
// an applied claim is refused as late instead of answered "yours".
func lateFirst(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if at := backend.Instant(req.ScheduledAt); req.MaxLate > 0 && at.Before(time.Now().Add(-req.MaxLate)) {
				return backend.Grant{}, fmt.Errorf("%w: job %q at %s", backend.ErrOccurrenceTooLate, req.Job, at.Format(time.RFC3339Nano))
			}
			return next(ctx, req)
		},
	}
}

func TestNegativeControlMaxLate(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Leases { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	t.Run("ignored", func(t *testing.T) {
		conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return lateIgnored(b) },
			"LedgerClaimTooLateRefused", "LedgerClaimTooLateRetryAnswersYours", "LedgerClaimTooLateZeroIsNoBound")
	})
	t.Run("judged first", func(t *testing.T) {
		conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return lateFirst(b) },
			"LedgerClaimTooLateRetryAnswersYours")
	})
}
