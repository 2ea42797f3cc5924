package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func ledgerChecks() []check {
	return []check{
		{"LedgerOneWinnerAmongConcurrentClaims", checkOneWinner},
		{"LedgerRetriedClaimAnswersYours", checkClaimRetry},
		{"LedgerRetriedClaimRenewsLease", checkClaimRetryRenews},
		{"LedgerFinishedNeverClaimedAgain", checkFinishedNeverAgain},
		{"LedgerHeartbeatAndFinishGuarded", checkLedgerGuards},
		{"LedgerReclaimOnlyAfterExpiry", checkReclaim},
		{"LedgerReclaimRespectsMaxRunning", checkReclaimLimit},
		{"LedgerReclaimRacesClaimUnderMaxRunning", checkReclaimLimitRace},
		{"LedgerReclaimRespectsMaxAttempts", checkReclaimMaxAttempts}, {"LedgerStaleReclaimersRaceUnderMaxAttempts", checkReclaimMaxAttemptsRace},
		{"LedgerAbandonOnlyAfterExpiry", checkAbandon},
		{"LedgerClaimRefusedEarlyOrOverlapping", checkClaimLimits},
		{"LedgerHighWaterAndPrune", checkHighWaterPrune},
		{"LedgerListFilters", checkListRuns},
		{"LedgerListLeavesOutJobMeta", checkListRunsLeavesOutJobMeta},
		{"LedgerStoresAnyOutcomeText", checkOutcomeText},
		{"LedgerEndedContextIsNoAnswer", checkLedgerEndedContext},
	}
}

// checkLedgerEndedContext is EndedContextIsNoAnswer for the Ledger: a call
// whose context was cancelled with a cause (ErrLeaseLost, as a run whose
// lease was lost ends its context) answers with ctx's error, never with
// the cause as if the ledger had said it (lost, claimed, overlap), and
// changes nothing the owner holds.
func checkLedgerEndedContext(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	at, ttl := past(time.Second), e.ttl(30*time.Second)
	a := owner("a")
	g, err := b.Claim(ctx, claimReq("ended", at, a, ttl))
	mustNil(t, err, "Claim")
	ended, cancel := context.WithCancelCause(ctx)
	cancel(backend.ErrLeaseLost)
	calls := []struct {
		what string
		call func() error
	}{
		{"Claim of the held occurrence by another owner", func() error {
			_, err := b.Claim(ended, claimReq("ended", at, owner("b"), ttl))
			return err
		}},
		{"Claim of a free occurrence", func() error {
			_, err := b.Claim(ended, claimReq("ended-free", at, owner("b"), ttl))
			if errors.Is(err, backend.ErrNotApplied) {
				if r, gerr := b.GetRun(ctx, "ended-free", at); !errors.Is(gerr, backend.ErrNotFound) {
					t.Errorf("Claim with an ended context said not applied (%v), yet GetRun finds %+v, %v", err, r, gerr)
				}
			}
			return err
		}},
		{"Abandon of the held occurrence", func() error { _, err := b.Abandon(ended, "ended", at); return err }},
		{"Heartbeat", func() error {
			return b.Heartbeat(ended, backend.HeartbeatRequest{Job: "ended", ScheduledAt: at, Owner: a, Token: g.Token, TTL: ttl})
		}},
		{"Finish", func() error {
			return b.Finish(ended, backend.FinishRequest{Job: "ended", ScheduledAt: at, Owner: a, Token: g.Token,
				Outcome: backend.Outcome{State: backend.Succeeded, Duration: time.Millisecond, Result: "ok"}})
		}},
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case err == nil:
			t.Errorf("%s with an ended context succeeded", c.what)
		case definiteAnswer(err) != nil:
			t.Errorf("%s with a context cancelled with cause ErrLeaseLost: %v, which matches %v: the cause is not the ledger's answer", c.what, err, definiteAnswer(err))
		case !errors.Is(err, context.Canceled):
			t.Errorf("%s with a cancelled context: %v, want an error matching context.Canceled (and ErrNotApplied or nothing else)", c.what, err)
		}
	}
	mustNil(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "ended", ScheduledAt: at, Owner: a, Token: g.Token, TTL: ttl}),
		"Heartbeat with a live context after the calls with an ended one")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "ended", ScheduledAt: at, Owner: a, Token: g.Token,
		Outcome: backend.Outcome{State: backend.Succeeded, Duration: time.Millisecond, Result: "ok"}}), "Finish")
}

// past returns a scheduled instant d before now, at ledger precision.
func past(d time.Duration) time.Time { return backend.Instant(time.Now().Add(-d)) }

func claimReq(job string, at time.Time, o backend.Owner, ttl time.Duration) backend.ClaimRequest {
	return backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "v1", Owner: o, TTL: ttl}
}

func checkOneWinner(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	at := past(time.Second).Add(123 * time.Microsecond) // sub-millisecond part is normalised away
	ttl := e.ttl(30 * time.Second)
	const n = 32
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []backend.Owner
		losers  []*backend.ClaimedError
		other   []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := owner("i" + string(rune('a'+i%26)))
			_, err := b.Claim(ctx, claimReq("job", at, o, ttl))
			mu.Lock()
			defer mu.Unlock()
			var ce *backend.ClaimedError
			switch {
			case err == nil:
				winners = append(winners, o)
			case errors.As(err, &ce):
				losers = append(losers, ce)
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected claim errors: %v", other)
	}
	if len(winners) != 1 {
		t.Fatalf("%d winners among %d concurrent claims, want exactly 1", len(winners), n)
	}
	for _, l := range losers {
		if l.Run.Owner != winners[0] || l.Run.State != backend.Running || !l.Run.ScheduledAt.Equal(backend.Instant(at)) {
			t.Errorf("loser was told %+v, want the winner %v running at %v", l.Run, winners[0], backend.Instant(at))
		}
	}
	r, err := b.GetRun(ctx, "job", backend.Instant(at))
	mustNil(t, err, "GetRun")
	if r.Owner != winners[0] || r.Attempt != 1 || r.SpecVersion != "v1" {
		t.Errorf("GetRun = %+v", r)
	}
}

func checkClaimRetry(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	a, at := owner("a"), past(time.Second)
	req := claimReq("job", at, a, e.ttl(30*time.Second))
	g1, err := b.Claim(ctx, req)
	mustNil(t, err, "Claim")
	g2, err := b.Claim(ctx, req)
	mustNil(t, err, "retried Claim with the same nonce")
	if g1.Token != g2.Token {
		t.Fatalf("retried Claim answered token %d, want %d", g2.Token, g1.Token)
	}
}

func checkFinishedNeverAgain(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	a, at := owner("a"), past(time.Second)
	req := claimReq("job", at, a, e.ttl(30*time.Second))
	g, err := b.Claim(ctx, req)
	mustNil(t, err, "Claim")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Duration: time.Millisecond, Result: "ok"}}), "Finish")
	for _, o := range []backend.Owner{a, owner("b")} {
		req.Owner = o
		_, err = b.Claim(ctx, req)
		var ce *backend.ClaimedError
		if !errors.As(err, &ce) || ce.Run.State != backend.Succeeded {
			t.Fatalf("Claim of a finished occurrence by %s: got %v, want *ClaimedError in state succeeded", o.Instance, err)
		}
	}
	_, _, err = b.Reclaim(ctx, req)
	mustIs(t, err, backend.ErrOccurrenceClaimed, "Reclaim of a finished occurrence")
	r, err := b.GetRun(ctx, "job", at)
	mustNil(t, err, "GetRun")
	if r.State != backend.Succeeded || r.Result != "ok" || r.Duration != time.Millisecond || r.FinishedAt.IsZero() {
		t.Errorf("GetRun after Finish = %+v", r)
	}
}

func checkLedgerGuards(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	a, at := owner("a"), past(time.Second)
	ttl := e.ttl(30 * time.Second)
	g, err := b.Claim(ctx, claimReq("job", at, a, ttl))
	mustNil(t, err, "Claim")
	twin := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	mustIs(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: twin, Token: g.Token, TTL: ttl}), backend.ErrLeaseLost, "Heartbeat by another nonce")
	mustIs(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token + 1, TTL: ttl}), backend.ErrLeaseLost, "Heartbeat with a wrong token")
	mustIs(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: twin, Token: g.Token, Outcome: backend.Outcome{State: backend.Failed}}), backend.ErrLeaseLost, "Finish by another nonce")
	mustNil(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, TTL: ttl}), "Heartbeat by the runner")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: backend.Outcome{State: backend.Failed, Error: "boom"}}), "Finish by the runner")
	mustIs(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, TTL: ttl}), backend.ErrLeaseLost, "Heartbeat after Finish")
	mustIs(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), backend.ErrLeaseLost, "second Finish")
	r, err := b.GetRun(ctx, "job", at)
	mustNil(t, err, "GetRun")
	if r.State != backend.Failed || r.Error != "boom" {
		t.Errorf("GetRun = %+v, want failed with error boom", r)
	}
}

func checkReclaim(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	a, c, at := owner("a"), owner("c"), past(time.Second)
	short := e.ttl(200 * time.Millisecond)
	// The runner's lease runs at least until short after the Claim was
	// sent (the server granted it later): judged from there, not from its
	// reply, which a loaded host may deliver late.
	sent := time.Now()
	g1, err := b.Claim(ctx, claimReq("job", at, a, short))
	mustNil(t, err, "Claim")
	_, _, err = b.Reclaim(ctx, claimReq("never", at, c, short))
	mustIs(t, err, backend.ErrNotFound, "Reclaim of an occurrence never claimed")
	var (
		g2 backend.Grant
		r  backend.Run
	)
	req := claimReq("job", at, c, e.ttl(30*time.Second))
	_, _, err = b.Reclaim(ctx, req)
	if err == nil && time.Now().Before(sent.Add(short)) {
		t.Fatalf("Reclaim succeeded while the runner's lease (TTL %v) was live", short)
	}
	if err != nil {
		mustIs(t, err, backend.ErrLeaseNotExpired, "Reclaim while the runner's lease is live")
	}
	eventually(t, 10*time.Second+short, "Reclaim after the runner's lease expired", func() bool {
		g2, r, err = b.Reclaim(ctx, req)
		return err == nil
	})
	if g2.Token <= g1.Token || r.Attempt != 2 || r.Owner != c {
		t.Fatalf("Reclaim = %+v %+v, want token > %d, attempt 2, owner c", g2, r, g1.Token)
	}
	g3, _, err := b.Reclaim(ctx, req)
	mustNil(t, err, "retried Reclaim")
	if g3.Token != g2.Token {
		t.Errorf("retried Reclaim answered token %d, want %d", g3.Token, g2.Token)
	}
	mustIs(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g1.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), backend.ErrLeaseLost, "Finish by the dead runner")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: c, Token: g2.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish by the new runner")
}

func checkAbandon(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	a, at := owner("a"), past(time.Second)
	short := e.ttl(200 * time.Millisecond)
	_, err := b.Claim(ctx, claimReq("job", at, a, short))
	mustNil(t, err, "Claim")
	start := time.Now()
	_, err = b.Abandon(ctx, "job", at)
	if err == nil && time.Since(start) < short/2 {
		t.Fatalf("Abandon succeeded while the runner's lease (TTL %v) was live", short)
	}
	var r backend.Run
	eventually(t, 10*time.Second+short, "Abandon after expiry", func() bool {
		r, err = b.Abandon(ctx, "job", at)
		return err == nil
	})
	if r.State != backend.Abandoned {
		t.Fatalf("Abandon = %+v", r)
	}
	_, err = b.Claim(ctx, claimReq("job", at, owner("b"), short))
	mustIs(t, err, backend.ErrOccurrenceClaimed, "Claim of an abandoned occurrence")
	_, _, err = b.Reclaim(ctx, claimReq("job", at, owner("b"), short))
	mustIs(t, err, backend.ErrOccurrenceClaimed, "Reclaim of an abandoned occurrence")
}

func checkClaimLimits(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	future := backend.Instant(time.Now().Add(time.Hour))
	_, err := b.Claim(ctx, claimReq("job", future, owner("a"), ttl))
	mustIs(t, err, backend.ErrOccurrenceTooEarly, "Claim an hour early")
	_, err = b.GetRun(ctx, "job", future)
	mustIs(t, err, backend.ErrNotFound, "GetRun after a refused claim")
	req := claimReq("job", future, owner("a"), ttl)
	req.MaxEarly = 2 * time.Hour
	_, err = b.Claim(ctx, req)
	mustNil(t, err, "Claim within MaxEarly")

	first := claimReq("serial", past(2*time.Second), owner("a"), ttl)
	first.MaxRunning = 1
	g, err := b.Claim(ctx, first)
	mustNil(t, err, "first serial claim")
	second := claimReq("serial", past(time.Second), owner("b"), ttl)
	second.MaxRunning = 1
	_, err = b.Claim(ctx, second)
	mustIs(t, err, backend.ErrOccurrenceOverlap, "second claim while the first runs with MaxRunning 1")
	second.MaxRunning = 2
	_, err = b.Claim(ctx, claimReq("serial", past(1500*time.Millisecond), owner("c"), ttl))
	mustNil(t, err, "claim without a limit")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "serial", ScheduledAt: first.ScheduledAt, Owner: first.Owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish first")
	_, err = b.Claim(ctx, second)
	mustNil(t, err, "claim with MaxRunning 2 while one runs")
}

func checkHighWaterPrune(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	hw, _, err := b.HighWater(ctx, "job")
	mustNil(t, err, "HighWater of an unknown job")
	if !hw.IsZero() {
		t.Fatalf("HighWater of an unknown job = %v", hw)
	}
	var last uint64
	instants := []time.Time{past(10 * time.Second), past(8 * time.Second), past(6 * time.Second), past(4 * time.Second), past(2 * time.Second)}
	for i, at := range instants {
		o := owner("a")
		req := claimReq("job", at, o, ttl)
		req.SpecVersion = "v" + string(rune('1'+i))
		g, err := b.Claim(ctx, req)
		mustNil(t, err, "Claim")
		if g.Token <= last {
			t.Fatalf("claim token %d not greater than the job's previous %d", g.Token, last)
		}
		last = g.Token
		if i < 4 { // the newest stays running
			mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish")
		}
	}
	// An older occurrence claimed late does not lower the mark.
	g, err := b.Claim(ctx, claimReq("job", past(time.Minute), owner("a"), ttl))
	mustNil(t, err, "late Claim")
	last = g.Token
	hw, ver, err := b.HighWater(ctx, "job")
	mustNil(t, err, "HighWater")
	if !hw.Equal(instants[4]) || ver != "v5" {
		t.Fatalf("HighWater = %v %q, want %v v5", hw, ver, instants[4])
	}
	n0, err := b.Prune(ctx, time.Now().Add(-time.Hour), 10)
	mustNil(t, err, "Prune before any run finished")
	if n0 != 0 {
		t.Fatalf("Prune with a cutoff an hour ago deleted %d runs that finished just now", n0)
	}
	cutoff := time.Now().Add(time.Hour)
	n1, err := b.Prune(ctx, cutoff, 3)
	mustNil(t, err, "Prune")
	n2, err := b.Prune(ctx, cutoff, 3)
	mustNil(t, err, "Prune")
	n3, err := b.Prune(ctx, cutoff, 3)
	mustNil(t, err, "Prune")
	if n1 != 3 || n2 != 1 || n3 != 0 {
		t.Fatalf("Prune in batches of 3 deleted %d, %d, %d; want 3, 1, 0 (4 finished runs)", n1, n2, n3)
	}
	runs, err := b.ListRuns(ctx, backend.RunFilter{Job: "job"})
	mustNil(t, err, "ListRuns")
	if len(runs) != 2 || runs[0].State != backend.Running || runs[1].State != backend.Running {
		t.Fatalf("after Prune %d runs remain (%+v), want the 2 running", len(runs), runs)
	}
	hw, _, err = b.HighWater(ctx, "job")
	mustNil(t, err, "HighWater after Prune")
	if !hw.Equal(instants[4]) {
		t.Fatalf("HighWater after Prune = %v, want %v", hw, instants[4])
	}
	g, err = b.Claim(ctx, claimReq("job", past(time.Second), owner("b"), ttl))
	mustNil(t, err, "Claim after Prune")
	if g.Token <= last {
		t.Fatalf("claim token after Prune %d not greater than %d", g.Token, last)
	}
}

func checkListRuns(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	for i := range 6 {
		job := []string{"alpha", "beta"}[i%2]
		at := past(time.Duration(10-i) * time.Second)
		o := owner("a")
		g, err := b.Claim(ctx, claimReq(job, at, o, ttl))
		mustNil(t, err, "Claim")
		if i < 4 {
			mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: job, ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish")
		}
	}
	all, err := b.ListRuns(ctx, backend.RunFilter{})
	mustNil(t, err, "ListRuns")
	if len(all) != 6 {
		t.Fatalf("ListRuns returned %d runs, want 6", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].ScheduledAt.After(all[i-1].ScheduledAt) {
			t.Fatalf("ListRuns not newest first: %v after %v", all[i].ScheduledAt, all[i-1].ScheduledAt)
		}
	}
	alpha, err := b.ListRuns(ctx, backend.RunFilter{Job: "alpha"})
	mustNil(t, err, "ListRuns job")
	running, err := b.ListRuns(ctx, backend.RunFilter{State: backend.Running})
	mustNil(t, err, "ListRuns state")
	page, err := b.ListRuns(ctx, backend.RunFilter{Limit: 2, Before: all[1].ScheduledAt})
	mustNil(t, err, "ListRuns page")
	since, err := b.ListRuns(ctx, backend.RunFilter{Since: all[2].ScheduledAt})
	mustNil(t, err, "ListRuns since")
	if len(alpha) != 3 || len(running) != 2 || len(page) != 2 || !page[0].ScheduledAt.Equal(all[2].ScheduledAt) || len(since) != 3 {
		t.Fatalf("filters: job=alpha %d (want 3), running %d (want 2), page %d starting %v (want 2 from %v), since %d (want 3)",
			len(alpha), len(running), len(page), page, all[2].ScheduledAt, len(since))
	}
}
