package schedule

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// slowPauseRead answers the paused-state read (the pause records' listing)
// after delay, as a loaded backend does, and counts claims in claims.
func slowPauseRead(b backend.Backend, delay time.Duration, claims *atomic.Int32) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnListRecords: func(ctx context.Context, next faultbackend.ListRecordsFunc, req backend.ListRecordsRequest) ([]backend.Record, error) {
			if strings.Contains(req.Name, "!pause!") {
				time.Sleep(delay)
			}
			return next(ctx, req)
		},
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if req.Job == "tick" { // not the version's record
				claims.Add(1)
			}
			return next(ctx, req)
		},
	}
}

// TestClaimNotSentPastGraceAfterSlowReads: under policy skip an occurrence
// is checked against its misfire grace before the reads that precede its
// claim (paused state, schedule version); when those reads take longer
// than the grace the claim was sent anyway, for the ledger to refuse as
// too late. On a loaded MySQL such a claim still takes the job's row lock
// (the token) before it is refused, so claims that cannot win slowed those
// that could: checked again before it is sent, it is skipped here.
func TestClaimNotSentPastGraceAfterSlowReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		defer mem.Close()
		var claims atomic.Int32
		b := slowPauseRead(mem, 700*time.Millisecond, &claims)
		s, err := New(b, WithInstance("a"))
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		err = s.Register(Job{Name: "tick", Schedule: "@every 1s", MisfireGrace: 500 * time.Millisecond, Misfire: MisfireSkip,
			Func: func(ctx context.Context, r Run) error { ran.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if n := claims.Load(); n != 0 || ran.Load() != 0 {
			t.Errorf("%d claims sent (%d ran) after the paused-state read made them later than the grace, want 0", n, ran.Load())
		}
	})
}
