package schedule_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestSweeperReclaimHonoursMaxConcurrent: with MaxConcurrent 1, an
// occurrence whose runner died is not reclaimed while another occurrence of
// the job runs (the reclaimed attempt would overlap it); once that one
// finished, the next sweep reclaims and runs it.
func TestSweeperReclaimHonoursMaxConcurrent(t *testing.T) {
	triggerBackends(t, func(t *testing.T, b backend.Backend) {
		ctx := context.Background()
		l := schedule.NamespaceLedger(b, leasehold.DefaultNamespace)
		dead := backend.Instant(time.Now().Add(-2 * time.Second))
		deadRunner(t, b, "job", dead) // the default namespace maps no names
		live := backend.Instant(time.Now().Add(-time.Second))
		other := backend.Owner{Instance: "other", Nonce: backend.NewNonce()}
		g, err := l.Claim(ctx, backend.ClaimRequest{Job: "job", ScheduledAt: live, SpecVersion: "v", Owner: other, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "the dead runner's lease expires", func() bool {
			r, err := l.GetRun(ctx, "job", dead)
			return err == nil && r.Expired
		})
		fx := newEffects()
		logs := &testkit.Buffer{}
		s := newScheduler(t, b, "survivor", schedule.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", MaxConcurrent: 1,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		eventually.True(t, 10*time.Second, "a sweep refuses the reclaim at the limit (or takes it over)", func() bool {
			r, err := l.GetRun(ctx, "job", dead)
			return strings.Contains(logs.String(), "not reclaimed yet") || (err == nil && r.Attempt != 1)
		})
		r, err := l.GetRun(ctx, "job", dead)
		if err != nil || r.Owner.Instance != "dead" || r.Attempt != 1 || len(fx.get(dead)) != 0 {
			t.Fatalf("while another occurrence runs: record %+v (err %v), runs %v; want it untouched and not run", r, err, fx.get(dead))
		}
		if err := l.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: live, Owner: other, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "the dead runner's occurrence is reclaimed and run", func() bool {
			r, err := l.GetRun(ctx, "job", dead)
			return err == nil && r.State == backend.Succeeded
		})
		if runs := fx.get(dead); len(runs) != 1 || runs[0].Attempt != 2 || runs[0].Instance != "survivor" {
			t.Fatalf("runs of the reclaimed occurrence %+v, want one, attempt 2, by survivor", runs)
		}
	})
}

// TestCrashPolicies: each policy runs in a synctest bubble: the dead
// runner's 150 ms lease expiring and the sweep that settles it are
// virtual time.
func TestCrashPolicies(t *testing.T) {
	for _, policy := range []schedule.Crash{schedule.CrashRetry, schedule.CrashSkip} {
		t.Run(string(policy), func(t *testing.T) { synctest.Test(t, func(t *testing.T) { crashPolicy(t, policy) }) })
	}
}

// crashPolicy is one case of TestCrashPolicies inside its bubble.
func crashPolicy(t *testing.T, policy schedule.Crash) {
	b := memory.New()
	fx := newEffects()
	at := backend.Instant(time.Now().Add(-time.Second))
	dead := deadRunner(t, b, "job", at)
	s := newScheduler(t, b, "survivor")
	if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", Crash: policy,
		Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 10*time.Second, "the occurrence left by the dead runner is settled", func() bool {
		r, err := b.GetRun(context.Background(), "job", at)
		return err == nil && r.State.Finished()
	})
	r, _ := b.GetRun(context.Background(), "job", at)
	runs := fx.get(at)
	switch policy {
	case schedule.CrashRetry:
		if len(runs) != 1 || runs[0].Attempt != 2 || uint64(runs[0].Token) <= dead.Token || r.State != backend.Succeeded {
			t.Fatalf("retry: runs %+v, ledger %+v; want one run, attempt 2, token > %d", runs, r, dead.Token)
		}
	case schedule.CrashSkip:
		if len(runs) != 0 || r.State != backend.Abandoned {
			t.Fatalf("skip: runs %+v, ledger state %s; want no run and abandoned", runs, r.State)
		}
	}
}
