package conformance

import (
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
	b, ctx := e.new(), e.ctx()
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
	mustIs(t, err, backend.ErrOverlap, "Reclaim with MaxRunning 1 while another occurrence of the job runs")
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
	mustNil(t, b.Finish(ctx, "serial", live.ScheduledAt, bo, gLive.Token, backend.Outcome{State: backend.Succeeded}), "Finish the other occurrence")
	mustNil(t, b.Finish(ctx, "serial", dead, d, g2.Token, backend.Outcome{State: backend.Succeeded}), "Finish the reclaimed occurrence")
}
