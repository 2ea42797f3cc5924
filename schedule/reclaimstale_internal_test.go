package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// staleListing answers every ListRuns with its runs as they were at
// attempt 1: a sweep's listing read before another instance reclaimed the
// occurrence (and that runner died too).
type staleListing struct{ backend.Backend }

func (b staleListing) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	runs, err := b.Backend.ListRuns(ctx, f)
	for i := range runs {
		runs[i].Attempt = 1
	}
	return runs, err
}

// TestStaleSweepDoesNotReclaimPastMaxAttempts: a sweep that decides from a
// stale listing (attempt 1 of MaxAttempts 2, while the record is at
// attempt 2, whose runner died too) must not run attempt 3: the bound is
// judged by the ledger in the Reclaim itself, and the exhausted occurrence
// is abandoned, not left running to be retried by every sweep (a chaos run
// on etcd reached attempt 6 of 5).
func TestStaleSweepDoesNotReclaimPastMaxAttempts(t *testing.T) {
	const ttl = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	expired := func() bool { r, err := mem.GetRun(ctx, "crashy", at); return err == nil && r.Expired }
	if _, err := mem.Claim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: backend.Owner{Instance: "dead1", Nonce: backend.NewNonce()}, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "attempt 1's lease expires", expired)
	if _, _, err := mem.Reclaim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: backend.Owner{Instance: "dead2", Nonce: backend.NewNonce()}, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "attempt 2's lease expires", expired)

	ran := make(chan Run, 4)
	startJob(t, staleListing{mem}, "a", Job{Name: "crashy", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 2,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	var r backend.Run
	eventually.True(t, 30*time.Second, "the sweep settles the exhausted occurrence", func() bool {
		var err error
		r, err = mem.GetRun(ctx, "crashy", at)
		return err == nil && (r.State != backend.Running || r.Attempt > 2)
	})
	select {
	case got := <-ran:
		t.Errorf("the sweep ran attempt %d of an occurrence with MaxAttempts 2", got.Attempt)
	default:
	}
	if r.State != backend.Abandoned || r.Attempt != 2 {
		t.Errorf("record after the sweep: state %s, attempt %d; want abandoned at attempt 2", r.State, r.Attempt)
	}
}
