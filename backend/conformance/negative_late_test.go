package conformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/memory"
)

// lateIgnored drops MaxLate: every late claim goes through.
type lateIgnored struct{ backend.Backend }

func (b lateIgnored) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	req.MaxLate = 0
	return b.Backend.Claim(ctx, req)
}

// lateFirst judges MaxLate before the occurrence's record, so a retry of
// an applied claim is refused as late instead of answered "yours".
type lateFirst struct{ backend.Backend }

func (b lateFirst) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if at := backend.Instant(req.ScheduledAt); req.MaxLate > 0 && at.Before(time.Now().Add(-req.MaxLate)) {
		return backend.Grant{}, fmt.Errorf("%w: job %q at %s", backend.ErrOccurrenceTooLate, req.Job, at.Format(time.RFC3339Nano))
	}
	return b.Backend.Claim(ctx, req)
}

func TestNegativeControlMaxLate(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Leases { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	t.Run("ignored", func(t *testing.T) {
		conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return lateIgnored{b} },
			"LedgerClaimTooLateRefused", "LedgerClaimTooLateRetryAnswersYours", "LedgerClaimTooLateZeroIsNoBound")
	})
	t.Run("judged first", func(t *testing.T) {
		conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return lateFirst{b} },
			"LedgerClaimTooLateRetryAnswersYours")
	})
}
