package main

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// TestListRunsSkipsInternalRecords: without --job, runs reads past the
// scheduler's own records (newer here than every run) to show --limit runs.
func TestListRunsSkipsInternalRecords(t *testing.T) {
	ctx := context.Background()
	b := memory.New()
	base := backend.Instant(time.Now().Add(-time.Hour))
	record := func(job string, at time.Time) {
		t.Helper()
		owner := backend.Owner{Instance: "i", Nonce: backend.NewNonce()}
		g, err := b.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "v", Owner: owner, TTL: time.Minute,
			MaxEarly: time.Hour, MaxLate: 2 * time.Hour})
		if err != nil {
			t.Fatalf("claim %s: %v", job, err)
		}
		if err := b.Finish(ctx, backend.FinishRequest{Job: job, ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		record("tick", base.Add(time.Duration(i)*time.Second))
	}
	for i := range 5 {
		record("tick!pause!default", base.Add(time.Minute+time.Duration(i)*time.Second))
	}
	runs, err := listRuns(ctx, b, backend.RunFilter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Job != "tick" || runs[1].Job != "tick" || !runs[0].ScheduledAt.Equal(base.Add(2*time.Second)) {
		t.Fatalf("listRuns(limit 2) = %+v, want the two newest runs of tick", runs)
	}
	all, err := listRuns(ctx, b, backend.RunFilter{Limit: 50})
	if err != nil || len(all) != 3 {
		t.Fatalf("listRuns(limit 50) = %d runs, %v; want the 3 runs of tick", len(all), err)
	}
}
