package conformance

import (
	"errors"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// checkListRunsLeavesOutJobMeta: runs under a reserved name (one with
// backend.MetaSep: the versions, pause state and trigger-key markers an
// earlier release kept so, and the fences this one writes for it;
// docs/records.md) are not runs of a job. A listing without a job never
// returns them — whatever their state or instant, and without letting them
// take room of the limit — while naming one lists them (the scheduler
// reads an earlier release's metadata so).
func checkListRunsLeavesOutJobMeta(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	epoch := time.UnixMilli(1).UTC()
	type rec struct {
		job    string
		at     time.Time
		finish bool
	}
	real := []rec{{"alpha", past(5 * time.Second), true}, {"alpha", past(4 * time.Second), false}}
	meta := []rec{
		{"alpha!version", epoch, true},
		{"alpha!superseded!0123456789abcdef", epoch, true},
		{"alpha!pause!default", past(3 * time.Second), true}, // newer than every run
		{"ns:alpha!pause!ns", past(2 * time.Second), true},
		{"alpha!trigger!k", epoch.Add(time.Millisecond), false},
	}
	for _, r := range append(append([]rec{}, real...), meta...) {
		o := owner("a")
		g, err := b.Claim(ctx, claimReq(r.job, r.at, o, ttl))
		mustNil(t, err, "Claim "+r.job)
		if r.finish {
			mustNil(t, b.Finish(ctx, backend.FinishRequest{Job: r.job, ScheduledAt: r.at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}), "Finish "+r.job)
		}
	}
	onlyRuns := func(what string, runs []backend.Run, want int) {
		t.Helper()
		for _, r := range runs {
			if strings.Contains(r.Job, backend.MetaSep) || r.ScheduledAt.Year() < 2000 {
				t.Fatalf("%s returned job metadata %q at %v", what, r.Job, r.ScheduledAt)
			}
		}
		if len(runs) != want {
			t.Fatalf("%s returned %d runs, want %d", what, len(runs), want)
		}
	}
	all, err := b.ListRuns(ctx, backend.RunFilter{})
	mustNil(t, err, "ListRuns")
	onlyRuns("ListRuns{}", all, 2)
	running, err := b.ListRuns(ctx, backend.RunFilter{State: backend.Running})
	mustNil(t, err, "ListRuns running")
	onlyRuns("ListRuns{State: running}", running, 1)
	finished, err := b.ListRuns(ctx, backend.RunFilter{State: backend.Succeeded})
	mustNil(t, err, "ListRuns succeeded")
	onlyRuns("ListRuns{State: succeeded}", finished, 1)
	page, err := b.ListRuns(ctx, backend.RunFilter{Limit: 2})
	mustNil(t, err, "ListRuns limit")
	onlyRuns("ListRuns{Limit: 2}", page, 2)
	old, err := b.ListRuns(ctx, backend.RunFilter{Before: time.UnixMilli(1000).UTC()})
	mustNil(t, err, "ListRuns before")
	onlyRuns("ListRuns{Before: 1970}", old, 0)
	// A job's own name never reaches its metadata's records.
	if r, err := b.GetRun(ctx, "alpha", epoch); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("GetRun(alpha, epoch) = %+v, %v; want ErrNotFound (alpha!version is at the epoch, not alpha)", r, err)
	}
	for _, m := range meta {
		rs, err := b.ListRuns(ctx, backend.RunFilter{Job: m.job})
		mustNil(t, err, "ListRuns "+m.job)
		if len(rs) != 1 || rs[0].Job != m.job || !rs[0].ScheduledAt.Equal(m.at) {
			t.Fatalf("ListRuns{Job: %q} = %+v, want its one record at %v", m.job, rs, m.at)
		}
	}
}
