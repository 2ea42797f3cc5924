//go:build linux

package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func claim(job string, at time.Time, o backend.Owner, ttl time.Duration) backend.ClaimRequest {
	return backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "v1", Owner: o, TTL: ttl}
}

func TestClaimHeartbeatFinish(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	at := clk.wall.Add(-time.Second + 123*time.Microsecond) // sub-ms part is normalised away
	a, c := own("a"), own("c")
	g, err := b.Claim(ctx, claim("job", at, a, time.Minute))
	must(t, err, "Claim")
	if g.Token != 1 || g.TTL != time.Minute {
		t.Fatalf("grant %+v", g)
	}
	g2, err := b.Claim(ctx, claim("job", backend.Instant(at), a, time.Minute))
	must(t, err, "retried Claim")
	if g2.Token != g.Token {
		t.Fatalf("retry answered %d, want %d", g2.Token, g.Token)
	}
	_, err = b.Claim(ctx, claim("job", at, c, time.Minute))
	var ce *backend.ClaimedError
	if !errors.As(err, &ce) || !errors.Is(err, backend.ErrOccurrenceClaimed) {
		t.Fatalf("Claim by another owner: %v", err)
	}
	if ce.Run.Owner != a || ce.Run.State != backend.Running || !ce.Run.ScheduledAt.Equal(backend.Instant(at)) || ce.Run.Expired {
		t.Fatalf("ClaimedError run %+v", ce.Run)
	}
	hw, ver, err := b.HighWater(ctx, "job")
	must(t, err, "HighWater")
	if !hw.Equal(backend.Instant(at)) || ver != "v1" {
		t.Fatalf("HighWater = %v %q", hw, ver)
	}
	mustIs(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: c, Token: g.Token, TTL: time.Minute}), backend.ErrLeaseLost, "Heartbeat by another owner")
	mustIs(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token + 1, TTL: time.Minute}), backend.ErrLeaseLost, "Heartbeat with a wrong token")
	clk.advance(50 * time.Second)
	must(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, TTL: time.Minute}), "Heartbeat")
	clk.advance(50 * time.Second) // alive only thanks to the heartbeat
	clk.advance(1500 * time.Millisecond)
	out := backend.Outcome{State: backend.Failed, Duration: 3 * time.Second, Result: "r", Error: "boom"}
	must(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: out}), "Finish")
	mustIs(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: out}), backend.ErrLeaseLost, "second Finish")
	mustIs(t, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, TTL: time.Minute}), backend.ErrLeaseLost, "Heartbeat after Finish")
	r, err := b.GetRun(ctx, "job", at)
	must(t, err, "GetRun")
	wantClaimed := backend.Instant(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	wantFinished := wantClaimed.Add(101500 * time.Millisecond)
	if r.State != backend.Failed || r.Error != "boom" || r.Result != "r" || r.Duration != 3*time.Second ||
		!r.ClaimedAt.Equal(wantClaimed) || !r.FinishedAt.Equal(wantFinished) || r.Attempt != 1 || r.Token != 1 ||
		r.Owner != a || r.SpecVersion != "v1" || r.Job != "job" || r.Expired {
		t.Fatalf("GetRun = %+v", r)
	}
	for _, o := range []backend.Owner{a, c} {
		_, err = b.Claim(ctx, claim("job", at, o, time.Minute))
		if !errors.As(err, &ce) || ce.Run.State != backend.Failed {
			t.Fatalf("Claim of a finished occurrence: %v", err)
		}
	}
	_, err = b.GetRun(ctx, "job", at.Add(time.Millisecond))
	mustIs(t, err, backend.ErrNotFound, "GetRun of another instant")
}

func TestFinishAfterExpiryIsLost(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	a := own("a")
	at := clk.wall.Add(-time.Minute)
	g, err := b.Claim(ctx, claim("job", at, a, time.Second))
	must(t, err, "Claim")
	clk.advance(time.Second)
	mustIs(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), backend.ErrLeaseLost, "Finish after expiry")
	r, err := b.GetRun(ctx, "job", at)
	must(t, err, "GetRun")
	if r.State != backend.Running || !r.Expired {
		t.Fatalf("GetRun = %+v, want running and expired", r)
	}
}

func TestClaimTooEarlyAndOverlap(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	future := clk.wall.Add(time.Hour)
	_, err := b.Claim(ctx, claim("job", future, own("a"), time.Minute))
	mustIs(t, err, backend.ErrOccurrenceTooEarly, "Claim an hour early")
	_, err = b.GetRun(ctx, "job", future)
	mustIs(t, err, backend.ErrNotFound, "GetRun after a refused claim")
	hw, _, err := b.HighWater(ctx, "job")
	must(t, err, "HighWater")
	if !hw.IsZero() {
		t.Fatalf("refused claim raised the high-water mark to %v", hw)
	}
	req := claim("job", future, own("a"), time.Minute)
	req.MaxEarly = time.Hour
	_, err = b.Claim(ctx, req)
	must(t, err, "Claim exactly MaxEarly early")

	first := claim("serial", clk.wall.Add(-2*time.Second), own("a"), time.Second)
	first.MaxRunning = 1
	_, err = b.Claim(ctx, first)
	must(t, err, "first serial claim")
	second := claim("serial", clk.wall.Add(-time.Second), own("b"), time.Minute)
	second.MaxRunning = 1
	_, err = b.Claim(ctx, second)
	mustIs(t, err, backend.ErrOccurrenceOverlap, "second claim while the first runs")
	second.MaxRunning = 2
	_, err = b.Claim(ctx, second)
	must(t, err, "second claim with MaxRunning 2")
	third := claim("serial", clk.wall, own("c"), time.Minute)
	third.MaxRunning = 1
	clk.advance(time.Second) // the first runner's lease expires; the second still runs
	_, err = b.Claim(ctx, third)
	mustIs(t, err, backend.ErrOccurrenceOverlap, "third claim while the second runs")
	third.MaxRunning = 2
	_, err = b.Claim(ctx, third)
	must(t, err, "third claim: the expired first run does not count")
}

func TestReclaimAndAbandon(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	a, c := own("a"), own("c")
	at := clk.wall.Add(-time.Minute)
	g1, err := b.Claim(ctx, claim("job", at, a, time.Second))
	must(t, err, "Claim")
	_, _, err = b.Reclaim(ctx, claim("never", at, c, time.Minute))
	mustIs(t, err, backend.ErrNotFound, "Reclaim of an occurrence never claimed")
	_, _, err = b.Reclaim(ctx, claim("job", at, c, time.Minute))
	mustIs(t, err, backend.ErrLeaseNotExpired, "Reclaim while live")
	_, err = b.Abandon(ctx, "job", at)
	mustIs(t, err, backend.ErrLeaseNotExpired, "Abandon while live")
	clk.advance(time.Second)
	req := claim("job", at, c, time.Minute)
	req.SpecVersion = "v2"
	g2, r, err := b.Reclaim(ctx, req)
	must(t, err, "Reclaim")
	if g2.Token != g1.Token+1 || r.Attempt != 2 || r.Owner != c || r.SpecVersion != "v2" || r.Expired || r.State != backend.Running {
		t.Fatalf("Reclaim = %+v %+v", g2, r)
	}
	g3, _, err := b.Reclaim(ctx, req)
	must(t, err, "retried Reclaim")
	if g3.Token != g2.Token {
		t.Fatalf("retried Reclaim answered %d, want %d", g3.Token, g2.Token)
	}
	got, err := b.GetRun(ctx, "job", at)
	must(t, err, "GetRun")
	if got != r {
		t.Fatalf("GetRun = %+v, Reclaim returned %+v", got, r)
	}
	mustIs(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: a, Token: g1.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), backend.ErrLeaseLost, "Finish by the dead runner")
	clk.advance(time.Minute)
	ab, err := b.Abandon(ctx, "job", at)
	must(t, err, "Abandon")
	if ab.State != backend.Abandoned || ab.FinishedAt.IsZero() || ab.Expired {
		t.Fatalf("Abandon = %+v", ab)
	}
	_, err = b.Abandon(ctx, "job", at)
	mustIs(t, err, backend.ErrOccurrenceClaimed, "second Abandon")
	_, _, err = b.Reclaim(ctx, claim("job", at, own("d"), time.Minute))
	mustIs(t, err, backend.ErrOccurrenceClaimed, "Reclaim of an abandoned occurrence")
	_, err = b.Claim(ctx, claim("job", at, own("d"), time.Minute))
	mustIs(t, err, backend.ErrOccurrenceClaimed, "Claim of an abandoned occurrence")
	_, err = b.Abandon(ctx, "never", at)
	mustIs(t, err, backend.ErrNotFound, "Abandon of an occurrence never claimed")
	// The job's counter went on from the reclaim.
	g4, err := b.Claim(ctx, claim("job", at.Add(time.Second), a, time.Minute))
	must(t, err, "Claim")
	if g4.Token != g2.Token+1 {
		t.Fatalf("next claim token %d, want %d", g4.Token, g2.Token+1)
	}
	// Tokens are per job.
	g5, err := b.Claim(ctx, claim("other", at, a, time.Minute))
	must(t, err, "Claim other job")
	if g5.Token != 1 {
		t.Fatalf("first token of another job %d, want 1", g5.Token)
	}
}

func TestHighWaterPruneAndReopen(t *testing.T) {
	p, ctx := dbPath(t), context.Background()
	clk := newFakeClock()
	b := open(t, p, clk.option())
	base := clk.wall.Add(-time.Hour)
	var last uint64
	for i := range 5 {
		o := own("a")
		at := base.Add(time.Duration(i) * time.Minute)
		req := claim("job", at, o, time.Hour)
		req.SpecVersion = "v" + string(rune('1'+i))
		g, err := b.Claim(ctx, req)
		must(t, err, "Claim")
		last = g.Token
		if i < 4 {
			clk.advance(time.Second)
			must(t, b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish")
		}
	}
	_, err := b.Claim(ctx, claim("job", base.Add(-time.Hour), own("a"), time.Hour)) // late, older
	must(t, err, "late Claim")
	last++
	// Finished at wall+1s, +2s, +3s, +4s (ms precision). olderThan is exclusive.
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	n, err := b.Prune(ctx, start.Add(time.Second), 10)
	must(t, err, "Prune")
	if n != 0 {
		t.Fatalf("Prune(olderThan = first finish) deleted %d", n)
	}
	n, err = b.Prune(ctx, start.Add(time.Second+time.Nanosecond), 10)
	must(t, err, "Prune")
	if n != 1 {
		t.Fatalf("Prune(olderThan = first finish + 1ns) deleted %d, want 1", n)
	}
	n1, err := b.Prune(ctx, start.Add(time.Hour), 2)
	must(t, err, "Prune")
	n2, err := b.Prune(ctx, start.Add(time.Hour), 2)
	must(t, err, "Prune")
	if n1 != 2 || n2 != 1 {
		t.Fatalf("Prune batches deleted %d, %d; want 2, 1", n1, n2)
	}
	runs, err := b.ListRuns(ctx, backend.RunFilter{})
	must(t, err, "ListRuns")
	if len(runs) != 2 || runs[0].State != backend.Running || runs[1].State != backend.Running {
		t.Fatalf("after Prune: %+v", runs)
	}
	must(t, b.Close(), "Close")

	b2 := open(t, p, clk.option())
	hw, ver, err := b2.HighWater(ctx, "job")
	must(t, err, "HighWater")
	if !hw.Equal(backend.Instant(base.Add(4*time.Minute))) || ver != "v5" {
		t.Fatalf("HighWater after prune and reopen = %v %q", hw, ver)
	}
	g, err := b2.Claim(ctx, claim("job", base.Add(5*time.Minute), own("b"), time.Hour))
	must(t, err, "Claim after reopen")
	if g.Token != last+1 {
		t.Fatalf("claim token after prune and reopen %d, want %d", g.Token, last+1)
	}
}

func TestListRunsFilters(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	base := backend.Instant(clk.wall.Add(-time.Hour))
	for i := range 6 {
		job := []string{"alpha", "beta"}[i%2]
		at := base.Add(time.Duration(i) * time.Second)
		o := own("a")
		g, err := b.Claim(ctx, claim(job, at, o, time.Minute))
		must(t, err, "Claim")
		if i < 4 {
			must(t, b.Finish(ctx, backend.FinishRequest{Job: job, ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish")
		}
	}
	// Same instant, two jobs: ordered by job.
	_, err := b.Claim(ctx, claim("gamma", base.Add(5*time.Second), own("a"), time.Minute))
	must(t, err, "Claim gamma")
	all, err := b.ListRuns(ctx, backend.RunFilter{})
	must(t, err, "ListRuns")
	if len(all) != 7 || all[0].Job != "beta" || all[1].Job != "gamma" {
		t.Fatalf("ListRuns = %d runs, first %s %s", len(all), all[0].Job, all[1].Job)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ScheduledAt.After(all[i-1].ScheduledAt) {
			t.Fatalf("not newest first at %d", i)
		}
	}
	count := func(f backend.RunFilter) int {
		rs, err := b.ListRuns(ctx, f)
		must(t, err, "ListRuns")
		return len(rs)
	}
	cases := []struct {
		name string
		f    backend.RunFilter
		want int
	}{
		{"job", backend.RunFilter{Job: "alpha"}, 3},
		{"state", backend.RunFilter{State: backend.Running}, 3},
		{"job+state", backend.RunFilter{Job: "beta", State: backend.Succeeded}, 2},
		{"since", backend.RunFilter{Since: base.Add(4 * time.Second)}, 3},
		{"since sub-ms", backend.RunFilter{Since: base.Add(4*time.Second - time.Microsecond)}, 3},
		{"since sub-ms after", backend.RunFilter{Since: base.Add(4*time.Second + time.Microsecond)}, 2},
		{"before", backend.RunFilter{Before: base.Add(2 * time.Second)}, 2},
		{"before sub-ms", backend.RunFilter{Before: base.Add(2*time.Second + time.Microsecond)}, 3},
		{"limit", backend.RunFilter{Limit: 4}, 4},
		{"page", backend.RunFilter{Before: base.Add(5 * time.Second), Limit: 2}, 2},
	}
	for _, c := range cases {
		if got := count(c.f); got != c.want {
			t.Errorf("%s: %d runs, want %d", c.name, got, c.want)
		}
	}
}

func TestLedgerBadInputChangesNothing(t *testing.T) {
	b, ctx := open(t, dbPath(t)), context.Background()
	a, now := own("a"), time.Now()
	calls := map[string]func() error{
		"claim no job":    func() error { _, err := b.Claim(ctx, claim("", now, a, time.Minute)); return err },
		"claim zero time": func() error { _, err := b.Claim(ctx, claim("j", time.Time{}, a, time.Minute)); return err },
		"claim year 1960": func() error {
			_, err := b.Claim(ctx, claim("j", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), a, time.Minute))
			return err
		},
		"claim zero ttl": func() error { _, err := b.Claim(ctx, claim("j", now, a, 0)); return err },
		"claim zero nonce": func() error {
			_, err := b.Claim(ctx, claim("j", now, backend.Owner{Instance: "a"}, time.Minute))
			return err
		},
		"claim neg early": func() error {
			r := claim("j", now, a, time.Minute)
			r.MaxEarly = -1
			_, err := b.Claim(ctx, r)
			return err
		},
		"claim neg running": func() error {
			r := claim("j", now, a, time.Minute)
			r.MaxRunning = -1
			_, err := b.Claim(ctx, r)
			return err
		},
		"heartbeat token 0": func() error {
			return b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "j", ScheduledAt: now, Owner: a, Token: 0, TTL: time.Minute})
		},
		"heartbeat bad ttl": func() error {
			return b.Heartbeat(ctx, backend.HeartbeatRequest{Job: "j", ScheduledAt: now, Owner: a, Token: 1, TTL: 0})
		},
		"finish bad state": func() error {
			return b.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: now, Owner: a, Token: 1, Outcome: backend.Outcome{State: backend.Running}})
		},
		"finish neg dur": func() error {
			return b.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: now, Owner: a, Token: 1, Outcome: backend.Outcome{State: backend.Failed, Duration: -1}})
		},
		"reclaim no job":    func() error { _, _, err := b.Reclaim(ctx, claim("", now, a, time.Minute)); return err },
		"abandon zero time": func() error { _, err := b.Abandon(ctx, "j", time.Time{}); return err },
		"highwater no job":  func() error { _, _, err := b.HighWater(ctx, ""); return err },
		"getrun no job":     func() error { _, err := b.GetRun(ctx, "", now); return err },
		"prune zero time":   func() error { _, err := b.Prune(ctx, time.Time{}, 10); return err },
		"prune big batch":   func() error { _, err := b.Prune(ctx, now, 10001); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	runs, err := b.ListRuns(ctx, backend.RunFilter{})
	must(t, err, "ListRuns")
	if len(runs) != 0 {
		t.Fatalf("rejected calls created %d runs", len(runs))
	}
	g, err := b.Claim(ctx, claim("j", now, a, time.Minute))
	must(t, err, "Claim")
	if g.Token != 1 {
		t.Fatalf("first valid claim token %d, want 1", g.Token)
	}
}

func TestFinishTruncatesTexts(t *testing.T) {
	b, ctx := open(t, dbPath(t)), context.Background()
	a, at := own("a"), time.Now().Add(-time.Second)
	g, err := b.Claim(ctx, claim("j", at, a, time.Minute))
	must(t, err, "Claim")
	long := make([]byte, backend.MaxResultLen+100)
	for i := range long {
		long[i] = 'x'
	}
	must(t, b.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: at, Owner: a, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: string(long), Error: string(long)}}), "Finish")
	r, err := b.GetRun(ctx, "j", at)
	must(t, err, "GetRun")
	if len(r.Result) > backend.MaxResultLen || len(r.Error) > backend.MaxErrorLen ||
		r.Result != backend.CleanText(string(long), backend.MaxResultLen) || r.Error != backend.CleanText(string(long), backend.MaxErrorLen) {
		t.Fatalf("stored result %d bytes, error %d bytes: not CleanText's head and tail within the limits", len(r.Result), len(r.Error))
	}
}
