package conformance

import (
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// checkReclaimLimit: Reclaim honours MaxRunning as Claim does. A reclaimed
// attempt runs beside the job's other occurrences, so taking over an
// expired occurrence while the job already runs MaxRunning others under
// unexpired leases is refused with ErrOverlap, and changes nothing. The
// occurrence being reclaimed does not count itself, and a retry answered
// "yours" is never refused by the limit (issue #15 item 5).
func checkReclaimLimit(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	short, long := e.ttl(200*time.Millisecond), e.ttl(30*time.Second)
	a, bo, c, d := owner("a"), owner("b"), owner("c"), owner("d")
	dead := past(3 * time.Second)
	g1, err := b.Claim(ctx, claimReq("serial", dead, a, short))
	mustNil(t, err, "Claim of the occurrence whose runner dies")
	limited := func(o backend.Owner, max int) backend.ClaimRequest {
		req := claimReq("serial", dead, o, long)
		req.MaxRunning = max
		return req
	}
	// Once its lease expired, another occurrence of the job starts under the
	// limit (the expired one does not count).
	live := claimReq("serial", past(2*time.Second), bo, long)
	live.MaxRunning = 1
	var gLive backend.Grant
	eventually(t, 10*time.Second+short, "claim with MaxRunning 1 beside an expired occurrence", func() bool {
		gLive, err = b.Claim(ctx, live)
		return err == nil
	})
	_, _, err = b.Reclaim(ctx, limited(c, 1))
	mustIs(t, err, backend.ErrOccurrenceOverlap, "Reclaim with MaxRunning 1 while another occurrence of the job runs")
	r, err := b.GetRun(ctx, "serial", dead)
	mustNil(t, err, "GetRun after a refused Reclaim")
	if r.Owner != a || r.Token != g1.Token || r.Attempt != 1 || r.State != backend.Running {
		t.Fatalf("a refused Reclaim changed the run: %+v, want owner a, token %d, attempt 1, running", r, g1.Token)
	}
	// The limit counts the job's other occurrences, not the reclaimed one.
	g2, r, err := b.Reclaim(ctx, limited(d, 2))
	mustNil(t, err, "Reclaim with MaxRunning 2 while one other occurrence runs")
	if g2.Token <= gLive.Token || r.Attempt != 2 || r.Owner != d {
		t.Fatalf("Reclaim = %+v %+v, want token > %d, attempt 2, owner d", g2, r, gLive.Token)
	}
	// A retry answered "yours" renews; the limit does not apply to it.
	retry := limited(d, 1)
	g3, _, err := b.Reclaim(ctx, retry)
	mustNil(t, err, "retried Reclaim with MaxRunning 1 (its own occurrence does not count)")
	if g3.Token != g2.Token {
		t.Errorf("retried Reclaim answered token %d, want %d", g3.Token, g2.Token)
	}
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "serial", ScheduledAt: live.ScheduledAt, Owner: bo, Token: gLive.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish the other occurrence")
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "serial", ScheduledAt: dead, Owner: d, Token: g2.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish the reclaimed occurrence")
}

// checkReclaimLimitRace: a Reclaim and a Claim of the same job racing, both
// with MaxRunning 1, never both win — the backend serialises the count with
// the take-over as it does for two claims. (With one occurrence expired and
// none other running, exactly one of them wins.) Several jobs race at once.
func checkReclaimLimitRace(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	short, long := e.ttl(200*time.Millisecond), e.ttl(30*time.Second)
	const rounds = 8
	dead, next := past(3*time.Second), past(2*time.Second)
	job := func(i int) string { return "race" + string(rune('a'+i)) }
	for i := range rounds {
		_, err := b.Claim(ctx, claimReq(job(i), dead, owner("a"), short))
		mustNil(t, err, "Claim of the occurrence whose runner dies")
	}
	eventually(t, 10*time.Second+short, "the dead runners' leases expire", func() bool {
		for i := range rounds {
			if r, err := b.GetRun(ctx, job(i), dead); err != nil || !r.Expired {
				return false
			}
		}
		return true
	})
	type result struct{ reclaim, claim error }
	results := make([]result, rounds)
	var wg sync.WaitGroup
	for i := range rounds {
		rq, cq := claimReq(job(i), dead, owner("c"), long), claimReq(job(i), next, owner("d"), long)
		rq.MaxRunning, cq.MaxRunning = 1, 1
		wg.Add(2)
		go func() { defer wg.Done(); _, _, results[i].reclaim = b.Reclaim(ctx, rq) }()
		go func() { defer wg.Done(); _, results[i].claim = b.Claim(ctx, cq) }()
	}
	wg.Wait()
	for i, r := range results {
		switch {
		case r.reclaim == nil && r.claim == nil:
			t.Fatalf("job %s: a Reclaim and a Claim both won with MaxRunning 1", job(i))
		case r.reclaim == nil:
			mustIs(t, r.claim, backend.ErrOccurrenceOverlap, "Claim that lost to a Reclaim under MaxRunning 1")
		case r.claim == nil:
			mustIs(t, r.reclaim, backend.ErrOccurrenceOverlap, "Reclaim that lost to a Claim under MaxRunning 1")
		default:
			t.Fatalf("job %s: neither won: reclaim %v, claim %v", job(i), r.reclaim, r.claim)
		}
	}
}
