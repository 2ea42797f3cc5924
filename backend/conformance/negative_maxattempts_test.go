package conformance_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// attemptsIgnored drops a positive MaxAttempts (it still validates a
// negative one): every expired occurrence is reclaimed, however many
// attempts it ran.
func attemptsIgnored(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnReclaim: func(ctx context.Context, next faultbackend.ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
			req.MaxAttempts = min(req.MaxAttempts, 0)
			return next(ctx, req)
		},
	}
}

// attemptsFirst judges MaxAttempts before the occurrence's record, so a
// retry of an applied reclaim is refused as exhausted instead of answered
// "yours".
func attemptsFirst(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnReclaim: func(ctx context.Context, next faultbackend.ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
			if r, err := b.GetRun(ctx, req.Job, req.ScheduledAt); err == nil && req.MaxAttempts > 0 && r.Attempt >= req.MaxAttempts {
				return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s ran %d attempts", backend.ErrOccurrenceExhausted, req.Job, r.Attempt)
			}
			return next(ctx, req)
		},
	}
}

func TestNegativeControlMaxAttempts(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Leases { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	t.Run("ignored", func(t *testing.T) {
		conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return attemptsIgnored(b) },
			"LedgerReclaimRespectsMaxAttempts", "LedgerStaleReclaimersRaceUnderMaxAttempts")
	})
	t.Run("judged first", func(t *testing.T) {
		conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return attemptsFirst(b) },
			"LedgerReclaimRespectsMaxAttempts")
	})
}
