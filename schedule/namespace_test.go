package schedule_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestNamespacesShareNoClaims: two namespaces on one backend use the same
// job name and the same instant; each claims and runs its own occurrence,
// and each sees only its own history.
func TestNamespacesShareNoClaims(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	owner := backend.Owner{Instance: "i", Nonce: backend.NewNonce()}
	for _, ns := range []string{"default", "team-a", "team-b"} {
		l := schedule.NamespaceLedger(b, ns)
		g, err := l.Claim(ctx, backend.ClaimRequest{Job: "report", ScheduledAt: at, Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatalf("namespace %s: claim of report@%s: %v (another namespace's claim must not count)", ns, at, err)
		}
		if err := l.Finish(ctx, backend.FinishRequest{Job: "report", ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: ns}}); err != nil {
			t.Fatal(err)
		}
		_, err = l.Claim(ctx, backend.ClaimRequest{Job: "report", ScheduledAt: at, Owner: backend.Owner{Instance: "j", Nonce: backend.NewNonce()}, TTL: time.Minute})
		var ce *backend.ClaimedError
		if !errors.As(err, &ce) || ce.Run.Job != "report" {
			t.Fatalf("namespace %s: second claim: %v, want a ClaimedError naming job report", ns, err)
		}
	}
	for _, ns := range []string{"default", "team-a", "team-b"} {
		l := schedule.NamespaceLedger(b, ns)
		for name, f := range map[string]backend.RunFilter{"by job": {Job: "report"}, "all jobs": {}} {
			rs, err := l.ListRuns(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 1 || rs[0].Job != "report" || rs[0].Result != ns {
				t.Fatalf("namespace %s, %s: runs %+v, want only its own report (result %q)", ns, name, rs, ns)
			}
		}
		r, err := l.GetRun(ctx, "report", at)
		if err != nil || r.Result != ns || r.Job != "report" {
			t.Fatalf("namespace %s: GetRun = %+v, %v", ns, r, err)
		}
	}
}

// TestNamespaceSchedulersRunTheirOwnTrigger: schedulers of two namespaces
// with one job name both run a trigger with the same key.
func TestNamespaceSchedulersRunTheirOwnTrigger(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	ran := make(chan string, 2)
	for _, ns := range []string{"team-a", "team-b"} {
		s := newScheduler(t, b, "i-"+ns, schedule.WithNamespace(ns))
		if err := s.Register(schedule.Job{Name: "report", Schedule: "@yearly",
			Func: func(context.Context, schedule.Run) error { ran <- ns; return nil }}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		if err := s.Trigger(ctx, "report", "manual-1"); err != nil {
			t.Fatalf("namespace %s: Trigger: %v", ns, err)
		}
	}
	got := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case ns := <-ran:
			got[ns] = true
		case <-timeout:
			t.Fatalf("triggered runs: %v, want both namespaces", got)
		}
	}
}
