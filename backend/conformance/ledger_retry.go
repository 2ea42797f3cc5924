package conformance

import (
	"time"

	"github.com/leasehold/leasehold/backend"
)

// checkClaimRetryRenews: a Claim or Reclaim answered "yours" (a retry of an
// applied request, same owner nonce) renews the runner's lease to the TTL
// from now by the backend's clock, as Acquire does. Otherwise a first
// attempt applied late leaves the lease expiring at its arrival + TTL while
// the runner counts from the retry (issue #14 item 1, claims).
func checkClaimRetryRenews(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(2 * time.Second)
	a, c, d, at := owner("a"), owner("c"), owner("d"), past(time.Second)

	// probe checks, past the first grant's expiry but within the renewed
	// one, that another owner cannot take the occurrence over.
	probe := func(what string, start, retried time.Time, o backend.Owner) {
		t.Helper()
		time.Sleep(time.Until(start.Add(ttl + ttl/8)))
		if time.Since(retried) >= ttl*7/8 {
			t.Logf("%s: machine too slow to probe between the two expiries (%v since the retry)", what, time.Since(retried))
			return
		}
		_, _, err := b.Reclaim(ctx, claimReq("job", at, o, ttl))
		mustIs(t, err, backend.ErrLeaseNotExpired, what+": Reclaim by another owner after the first grant's TTL but within the renewed one")
	}

	t0 := time.Now()
	g1, err := b.Claim(ctx, claimReq("job", at, a, ttl))
	mustNil(t, err, "Claim")
	time.Sleep(time.Until(t0.Add(ttl / 2))) // the scenario: half the lease passes
	s1 := time.Now()
	g2, err := b.Claim(ctx, claimReq("job", at, a, ttl))
	mustNil(t, err, "retried Claim with the same nonce")
	if g2.Token != g1.Token {
		t.Fatalf("retried Claim answered token %d, want %d", g2.Token, g1.Token)
	}
	probe("Claim", t0, s1, c)

	var g3 backend.Grant
	var r0 time.Time
	eventually(t, 10*time.Second+2*ttl, "Reclaim after the runner's lease expired", func() bool {
		r0 = time.Now()
		g3, _, err = b.Reclaim(ctx, claimReq("job", at, c, ttl))
		return err == nil
	})
	time.Sleep(time.Until(r0.Add(ttl / 2)))
	s2 := time.Now()
	g4, _, err := b.Reclaim(ctx, claimReq("job", at, c, ttl))
	mustNil(t, err, "retried Reclaim with the same nonce")
	if g4.Token != g3.Token {
		t.Fatalf("retried Reclaim answered token %d, want %d", g4.Token, g3.Token)
	}
	probe("Reclaim", r0, s2, d)
	mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: c, Token: g3.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish by the runner")
}
