package conformance

import (
	"errors"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The MaxLate checks (issue #15 item 1): a claim of an occurrence older
// than the backend's clock minus MaxLate is a misfire and is refused with
// ErrTooLate, changing nothing; the bound is judged after the occurrence's
// record, so a retry of an applied claim still answers "yours" and a claim
// of a claimed occurrence still gets a *ClaimedError. The margins are wide
// (seconds against a 2 s or 500 ms bound) so that no clock tolerance is
// needed: every backend's clock is on this host.

func lateChecks() []check {
	return []check{
		{"LedgerClaimTooLateRefused", checkClaimTooLate},
		{"LedgerClaimTooLateRetryAnswersYours", checkClaimTooLateRetry},
		{"LedgerClaimTooLateZeroIsNoBound", checkClaimTooLateZero},
	}
}

func lateReq(job string, at time.Time, o backend.Owner, ttl, maxLate time.Duration) backend.ClaimRequest {
	r := claimReq(job, at, o, ttl)
	r.MaxLate = maxLate
	return r
}

func checkClaimTooLate(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	// An older occurrence claimed without a bound sets the high-water mark
	// that the refused claim must leave alone.
	base := past(30 * time.Second)
	_, err := b.Claim(ctx, claimReq("job", base, owner("a"), ttl))
	mustNil(t, err, "Claim 30 s late without MaxLate")

	late := lateReq("job", past(10*time.Second), owner("b"), ttl, 2*time.Second)
	_, err = b.Claim(ctx, late)
	mustIs(t, err, backend.ErrOccurrenceTooLate, "Claim 10 s late with MaxLate 2s")
	if at := late.ScheduledAt.Format(time.RFC3339Nano); !strings.Contains(err.Error(), at) || !strings.Contains(err.Error(), "2s") {
		t.Errorf("ErrTooLate message %q does not name the occurrence %s and the bound 2s", err, at)
	}
	_, err = b.GetRun(ctx, "job", late.ScheduledAt)
	mustIs(t, err, backend.ErrNotFound, "GetRun of an occurrence refused as too late")
	hw, _, err := b.HighWater(ctx, "job")
	mustNil(t, err, "HighWater")
	if !hw.Equal(base) {
		t.Errorf("HighWater after a refused late claim = %v, want it unchanged at %v", hw, base)
	}
	// Through the MaxRunning path too, and before MaxRunning: with the
	// job at its limit of 1 (base runs), the late claim is still a misfire.
	late.MaxRunning = 5
	_, err = b.Claim(ctx, late)
	mustIs(t, err, backend.ErrOccurrenceTooLate, "Claim 10 s late with MaxLate 2s, MaxRunning 5")
	late.MaxRunning = 1
	_, err = b.Claim(ctx, late)
	mustIs(t, err, backend.ErrOccurrenceTooLate, "Claim 10 s late with MaxLate 2s while the job is at MaxRunning 1")
	_, err = b.GetRun(ctx, "job", late.ScheduledAt)
	mustIs(t, err, backend.ErrNotFound, "GetRun of an occurrence refused as too late with MaxRunning")
	runs, err := b.ListRuns(ctx, backend.RunFilter{})
	mustNil(t, err, "ListRuns")
	if len(runs) != 1 {
		t.Errorf("after a refused late claim the ledger holds %d runs, want the 1 claimed before", len(runs))
	}

	// Control: 100 ms late is well within a 2 s bound.
	g, err := b.Claim(ctx, lateReq("job", past(100*time.Millisecond), owner("c"), ttl, 2*time.Second))
	mustNil(t, err, "Claim 100 ms late with MaxLate 2s")
	if g.Token == 0 {
		t.Errorf("Claim within MaxLate granted token 0")
	}
}

func checkClaimTooLateRetry(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	a, at := owner("a"), past(5*time.Second)
	// The first attempt was applied while the occurrence was in time (no
	// bound here); its retry, with a 500 ms bound, finds it 5 s old.
	g1, err := b.Claim(ctx, claimReq("job", at, a, ttl))
	mustNil(t, err, "Claim")
	g2, err := b.Claim(ctx, lateReq("job", at, a, ttl, 500*time.Millisecond))
	mustNil(t, err, "retried Claim with the same nonce, 5 s late with MaxLate 500ms")
	if g2.Token != g1.Token {
		t.Fatalf("retried late Claim answered token %d, want %d", g2.Token, g1.Token)
	}
	// The bound is live at this age: a fresh occurrence as old is refused.
	_, err = b.Claim(ctx, lateReq("other", at, owner("c"), ttl, 500*time.Millisecond))
	mustIs(t, err, backend.ErrOccurrenceTooLate, "Claim of an unclaimed occurrence 5 s late with MaxLate 500ms")

	// Another owner is told who holds it, not that it is late.
	_, err = b.Claim(ctx, lateReq("job", at, owner("b"), ttl, 500*time.Millisecond))
	var ce *backend.ClaimedError
	if !errors.As(err, &ce) || ce.Run.Owner != a || errors.Is(err, backend.ErrOccurrenceTooLate) {
		t.Fatalf("late Claim by another owner of a running occurrence: got %v, want *ClaimedError naming a (not ErrTooLate)", err)
	}
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g1.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish")
	_, err = b.Claim(ctx, lateReq("job", at, a, ttl, 500*time.Millisecond))
	if !errors.As(err, &ce) || ce.Run.State != backend.Succeeded || errors.Is(err, backend.ErrOccurrenceTooLate) {
		t.Fatalf("late Claim of a finished occurrence: got %v, want *ClaimedError in state succeeded (not ErrTooLate)", err)
	}
}

func checkClaimTooLateZero(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	day := past(24 * time.Hour)
	_, err := b.Claim(ctx, claimReq("unbounded", day, owner("a"), ttl))
	mustNil(t, err, "Claim a day late with MaxLate 0 (no bound)")
	_, err = b.Claim(ctx, lateReq("wide", day, owner("a"), ttl, 48*time.Hour))
	mustNil(t, err, "Claim a day late with MaxLate 48h")
	_, err = b.Claim(ctx, lateReq("narrow", day, owner("a"), ttl, time.Hour))
	mustIs(t, err, backend.ErrOccurrenceTooLate, "Claim a day late with MaxLate 1h")
}
