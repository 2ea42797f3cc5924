package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// carryOverChecks check that a Scheduler carries over the job metadata an
// earlier release kept as runs of the ledger (schedule/legacy.go). They
// need a ledger.
func carryOverChecks() []check {
	return []check{
		{"SchedulerCarriesOverEarlierRelease", checkCarryOver},
		{"SchedulersCarryOverAtOnce", checkCarryOverAtOnce},
		{"SchedulerCarriesOverAgainAfterARollback", checkCarryOverAfterRollback},
	}
}

// legacyRun writes one run of the ledger as the earlier release wrote its
// metadata: a claim under name at at with specVersion, then, unless state
// is Running, its finish with state, result and errText.
func legacyRun(t T, ctx context.Context, l backend.Ledger, name string, at time.Time, specVersion string, state backend.RunState, result, errText string) {
	t.Helper()
	legacyRunBy(t, ctx, l, "earlier", name, at, specVersion, state, result, errText)
}

// legacyRunBy is legacyRun by owner instance instance.
func legacyRunBy(t T, ctx context.Context, l backend.Ledger, instance, name string, at time.Time, specVersion string, state backend.RunState, result, errText string) {
	t.Helper()
	o := owner(instance)
	g, err := l.Claim(ctx, backend.ClaimRequest{Job: name, ScheduledAt: at, SpecVersion: specVersion, Owner: o,
		TTL: time.Minute, MaxEarly: 100 * 365 * 24 * time.Hour})
	mustNil(t, err, "legacy claim of "+name)
	if state == backend.Running {
		return
	}
	mustNil(t, l.Finish(ctx, backend.FinishRequest{Job: name, ScheduledAt: at, Owner: o, Token: g.Token,
		Outcome: backend.Outcome{State: state, Result: result, Error: errText}}), "legacy finish of "+name)
}

func mustSpec(t T, s string) *schedule.Spec {
	t.Helper()
	sp, err := schedule.Parse(s, "")
	mustNil(t, err, "Parse "+s)
	return sp
}

// checkCarryOver: metadata written as an earlier release wrote it — two
// schedule versions and a superseded mark, pause states (paused; resumed
// after a pause; never recorded), trigger keys (used; refused; held by a
// Trigger that never finished), a retried attempt's failure, a job of
// another namespace — reads the same through a Scheduler of this release:
// paused jobs stay paused, used keys stay used, a refused key is free, a
// superseded version is refused, the attempt is readable; every job is
// fenced off for the earlier release (its pause state there reads paused);
// a second Scheduler carries nothing over again, and a Resume is not undone
// by it.
func checkCarryOver(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	first, second, gone := mustSpec(t, "@every 1h"), mustSpec(t, "@every 2h"), mustSpec(t, "@every 3h")
	syncSpec, mailSpec, flakySpec := mustSpec(t, "@every 4h"), mustSpec(t, "@every 5h"), mustSpec(t, "@every 6h")
	epoch := time.UnixMilli(1).UTC()
	t1, t2, t3, t4 := past(3*time.Hour), past(2*time.Hour), past(time.Hour), past(30*time.Minute)
	ok := backend.Succeeded
	legacyRun(t, ctx, b, "report!version", epoch, first.Version(), ok, first.String(), "")
	legacyRun(t, ctx, b, "report!version", t1, second.Version(), ok, second.String(), "")
	legacyRun(t, ctx, b, "report!superseded!"+first.Version(), t1, second.Version(), ok, "superseded by "+second.Version(), "")
	// A version whose history was pruned: only its mark is left.
	legacyRun(t, ctx, b, "report!superseded!"+gone.Version(), epoch.Add(time.Millisecond), first.Version(), ok, "superseded", "")
	legacyRun(t, ctx, b, "report!pause!default", t2, "paused", ok, "by earlier", "")
	legacyRun(t, ctx, b, "sync!version", epoch, syncSpec.Version(), ok, syncSpec.String(), "")
	legacyRun(t, ctx, b, "sync!pause!default", t2, "paused", ok, "by earlier", "")
	legacyRun(t, ctx, b, "sync!pause!default", t3, "resumed", ok, "by earlier", "")
	legacyRun(t, ctx, b, "sync!trigger!k-used", epoch, "", ok, "run at …", "")
	legacyRun(t, ctx, b, "sync!trigger!k-refused", epoch, "", backend.Failed, "", "refused: overlap")
	legacyRun(t, ctx, b, "sync!trigger!k-held", epoch, "", backend.Running, "", "")
	legacyRun(t, ctx, b, "mail!version", epoch, mailSpec.Version(), ok, mailSpec.String(), "")
	legacyRun(t, ctx, b, "flaky!version", epoch, flakySpec.Version(), ok, flakySpec.String(), "")
	legacyRun(t, ctx, b, "flaky!attempt!1", t4, "42", backend.Failed, "partial output", "first attempt failed")
	legacyRun(t, ctx, b, "shop:report!version", epoch, first.Version(), ok, first.String(), "")
	legacyRun(t, ctx, b, "shop:report!pause!shop", t2, "paused", ok, "by earlier", "")

	nop := func(context.Context, schedule.Run) error { return nil }
	start := func(instance, ns string, jobs ...schedule.Job) *schedule.Scheduler {
		t.Helper()
		s, err := schedule.New(b, schedule.WithInstance(instance), schedule.WithNamespace(ns))
		mustNil(t, err, "schedule.New")
		for _, j := range jobs {
			mustNil(t, s.Register(j), "Register "+j.Name)
		}
		mustNil(t, s.Start(ctx), "Start")
		e.tb.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		select {
		case <-s.StartedUp():
		case <-ctx.Done():
			t.Fatalf("scheduler %s did not start up", instance)
		}
		return s
	}
	jobs := []schedule.Job{
		{Name: "report", Schedule: second.String(), Func: nop},
		{Name: "sync", Schedule: syncSpec.String(), Func: nop},
		{Name: "mail", Schedule: mailSpec.String(), Func: nop},
		{Name: "flaky", Schedule: flakySpec.String(), Func: nop},
		{Name: "gamma", Schedule: "@every 7h", Func: nop}, // unknown to the earlier release
	}
	s := start("new", "default", jobs...)
	for job, want := range map[string]bool{"report": true, "sync": false, "mail": false, "gamma": false} {
		got, err := s.Paused(ctx, job)
		mustNil(t, err, "Paused "+job)
		if got != want {
			t.Errorf("Paused(%s) = %v after the carry-over, want %v (as the earlier release left it)", job, got, want)
		}
	}
	for _, st := range s.JobStatuses(0) {
		if st.Name == "report" && (st.CurrentVersion != second.Version() || st.VersionRefused) {
			t.Errorf("report's version after the carry-over: current %q (refused %v), want %q", st.CurrentVersion, st.VersionRefused, second.Version())
		}
	}
	vs, err := schedule.ReadVersions(ctx, schedule.NamespaceLedger(b, "default"), "report")
	mustNil(t, err, "ReadVersions")
	if len(vs) != 2 || vs[0].Version != second.Version() || !vs[0].From.Equal(t1) || vs[0].Spec != second.String() ||
		vs[1].Version != first.Version() || !vs[1].From.Equal(epoch) || vs[1].Spec != first.String() {
		t.Errorf("report's versions after the carry-over: %+v; want %s from %v, then (older) %s from the epoch", vs, second.Version(), t1, first.Version())
	}
	// Fenced: where the earlier release reads a pause state, every job now
	// reads paused, also one it never knew (it may learn it later).
	for _, job := range []string{"report", "sync", "mail", "flaky", "gamma"} {
		_, st, err := b.HighWater(ctx, job+"!pause!default")
		mustNil(t, err, "HighWater")
		if st != "paused" {
			t.Errorf("job %s's pause state where the earlier release reads it: %q, want paused (the fence)", job, st)
		}
	}
	// Trigger keys: used and held keys stay used, a refused one is free once.
	for key, want := range map[string]error{"k-used": backend.ErrOccurrenceClaimed, "k-held": backend.ErrOccurrenceClaimed, "k-refused": nil} {
		_, err := s.TriggerRun(ctx, "sync", key)
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("TriggerRun(sync, %s) = %v, want %v", key, err, want)
		}
	}
	if _, err := s.TriggerRun(ctx, "sync", "k-refused"); !errors.Is(err, backend.ErrOccurrenceClaimed) {
		t.Errorf("TriggerRun(sync, k-refused) a second time = %v, want ErrClaimed", err)
	}
	a, err := schedule.ReadAttempt(ctx, schedule.NamespaceLedger(b, "default"), "flaky", 1, t4)
	mustNil(t, err, "ReadAttempt")
	if a.State != backend.Failed || a.Error != "first attempt failed" || a.SpecVersion != "42" || a.Result != "partial output" {
		t.Errorf("ReadAttempt(flaky, 1) = %+v; want the earlier release's failed attempt (token 42)", a)
	}
	// Versions that were superseded, in the history or only by their mark,
	// are refused.
	for _, sp := range []*schedule.Spec{first, gone} {
		old := start("old-config-"+sp.Version()[:6], "default", schedule.Job{Name: "report", Schedule: sp.String(), Func: nop})
		for _, st := range old.JobStatuses(0) {
			if st.Name == "report" && !st.VersionRefused {
				t.Errorf("version %s (%s), superseded under the earlier release, was not refused", sp.Version(), sp)
			}
		}
	}
	// A Resume of this release stays: another Scheduler carries nothing
	// over again and fences nothing again.
	mustNil(t, s.Resume(ctx, "report"), "Resume")
	fenceHW, _, err := b.HighWater(ctx, "report!pause!default")
	mustNil(t, err, "HighWater")
	s2 := start("new2", "default", jobs...)
	if got, err := s2.Paused(ctx, "report"); err != nil || got {
		t.Errorf("after a Resume, a second Scheduler reads report as paused=%v (%v)", got, err)
	}
	if hw, st, err := b.HighWater(ctx, "report!pause!default"); err != nil || !hw.Equal(fenceHW) || st != "paused" {
		t.Errorf("a second Scheduler changed the earlier release's pause state: %v %q %v (was %v paused)", hw, st, err, fenceHW)
	}
	// Another namespace: its own names.
	shop := start("new-shop", "shop", schedule.Job{Name: "report", Schedule: first.String(), Func: nop})
	if got, err := shop.Paused(ctx, "report"); err != nil || !got {
		t.Errorf("Paused(report) in namespace shop = %v, %v; want true", got, err)
	}
	// Nothing was written to the ledger as a run of this release but the
	// fences: every run under a metadata name is the earlier release's or
	// a fence.
	for _, name := range []string{"report!version", "sync!trigger!k-refused", "flaky!attempt!1"} {
		rs, err := b.ListRuns(ctx, backend.RunFilter{Job: name})
		mustNil(t, err, "ListRuns "+name)
		for _, r := range rs {
			if !strings.HasPrefix(r.Owner.Instance, "earlier") {
				t.Errorf("a run %s at %v by %s was written under a metadata name by this release", name, r.ScheduledAt, r.Owner.Instance)
			}
		}
	}
}

// checkCarryOverAtOnce: Schedulers that start at once carry one job's
// metadata over together: none takes another's fence for the earlier
// release's pause state (a job resumed there stays resumed, a paused one
// paused), and the state is copied once.
func checkCarryOverAtOnce(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	epoch := time.UnixMilli(1).UTC()
	sp := mustSpec(t, "@every 1h")
	legacyRun(t, ctx, b, "paused!version", epoch, sp.Version(), backend.Succeeded, sp.String(), "")
	legacyRun(t, ctx, b, "paused!pause!default", past(time.Hour), "paused", backend.Succeeded, "", "")
	legacyRun(t, ctx, b, "resumed!version", epoch, sp.Version(), backend.Succeeded, sp.String(), "")
	legacyRun(t, ctx, b, "resumed!pause!default", past(2*time.Hour), "paused", backend.Succeeded, "", "")
	legacyRun(t, ctx, b, "resumed!pause!default", past(time.Hour), "resumed", backend.Succeeded, "", "")
	// A carrier that died after its fence, before its record of the
	// carry-over; the retention then pruned the fence's run (its mark
	// stays).
	legacyRun(t, ctx, b, "crashed!version", epoch, sp.Version(), backend.Succeeded, sp.String(), "")
	legacyRun(t, ctx, b, "crashed!pause!default", past(2*time.Hour), "resumed", backend.Succeeded, "", "")
	fenceAt := past(time.Hour)
	_, _, err := b.CreateRecord(ctx, backend.CreateRecordRequest{Name: "crashed!fence", Seq: fenceAt.UnixMilli(), Value: "fence", Owner: owner("leasehold-fence/dead")})
	mustNil(t, err, "CreateRecord of a fence")
	legacyRunBy(t, ctx, b, "leasehold-fence/dead", "crashed!pause!default", fenceAt, "paused", backend.Succeeded, "fence: …", "")
	_, err = b.Prune(ctx, time.Now().Add(time.Hour), 10000)
	mustNil(t, err, "Prune")
	for _, job := range []string{"paused", "resumed"} { // pruned too: their marks stand for their states
		legacyRun(t, ctx, b, job+"!version", epoch, sp.Version(), backend.Succeeded, sp.String(), "")
	}
	nop := func(context.Context, schedule.Run) error { return nil }
	const n = 4
	ss := make([]*schedule.Scheduler, n)
	var wg sync.WaitGroup
	for i := range ss {
		s, err := schedule.New(b, schedule.WithInstance(fmt.Sprint("new", i)))
		mustNil(t, err, "schedule.New")
		for _, j := range []string{"paused", "resumed", "crashed"} {
			mustNil(t, s.Register(schedule.Job{Name: j, Schedule: sp.String(), Func: nop}), "Register")
		}
		ss[i] = s
		e.tb.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	}
	for _, s := range ss {
		wg.Go(func() { _ = s.Start(ctx) })
	}
	wg.Wait()
	for i, s := range ss {
		select {
		case <-s.StartedUp():
		case <-ctx.Done():
			t.Fatalf("scheduler %d did not start up", i)
		}
		for job, want := range map[string]bool{"paused": true, "resumed": false, "crashed": false} {
			got, err := s.Paused(ctx, job)
			mustNil(t, err, "Paused")
			if got != want {
				t.Errorf("scheduler %d: Paused(%s) = %v, want %v: a fence of the earlier release was taken for its state", i, job, got, want)
			}
		}
	}
	for _, job := range []string{"paused", "resumed"} {
		rs, err := b.ListRecords(ctx, backend.ListRecordsRequest{Name: job + "!pause!default"})
		mustNil(t, err, "ListRecords")
		if len(rs) != 1 {
			t.Errorf("job %s's pause state was carried over as %d records (%+v), want 1", job, len(rs), rs)
		}
	}
	// The retention prunes the racing carriers' fences; a Scheduler that
	// starts after never takes one for a pause, whichever carrier's record
	// of the carry-over is the newest.
	for _, s := range ss {
		mustNil(t, s.Shutdown(ctx), "Shutdown")
	}
	_, err = b.Prune(ctx, time.Now().Add(time.Hour), 10000)
	mustNil(t, err, "Prune")
	late, err := schedule.New(b, schedule.WithInstance("late"))
	mustNil(t, err, "schedule.New")
	for _, j := range []string{"paused", "resumed", "crashed", "fresh"} {
		mustNil(t, late.Register(schedule.Job{Name: j, Schedule: sp.String(), Func: nop}), "Register")
	}
	mustNil(t, late.Start(ctx), "Start")
	e.tb.Cleanup(func() { _ = late.Shutdown(context.Background()) })
	<-late.StartedUp()
	for job, want := range map[string]bool{"paused": true, "resumed": false, "crashed": false, "fresh": false} {
		got, err := late.Paused(ctx, job)
		mustNil(t, err, "Paused")
		if got != want {
			t.Errorf("after the fences' runs were pruned: Paused(%s) = %v, want %v", job, got, want)
		}
	}
}

// checkCarryOverAfterRollback: every job a Scheduler runs is fenced off for
// the earlier release, even one that release never knew (it may learn it
// later); after a rollback, whatever that release recorded for the job (a
// pause, a resume, a used trigger key) is carried over by the next
// Scheduler, which fences again.
func checkCarryOverAfterRollback(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	nop := func(context.Context, schedule.Run) error { return nil }
	run := func(instance string, check func(s *schedule.Scheduler)) {
		t.Helper()
		s, err := schedule.New(b, schedule.WithInstance(instance))
		mustNil(t, err, "schedule.New")
		mustNil(t, s.Register(schedule.Job{Name: "j", Schedule: "@every 1h", Func: nop}), "Register")
		mustNil(t, s.Start(ctx), "Start")
		select {
		case <-s.StartedUp():
		case <-ctx.Done():
			t.Fatalf("scheduler %s did not start up", instance)
		}
		check(s)
		mustNil(t, s.Shutdown(ctx), "Shutdown")
	}
	legacyState := func() (time.Time, string) {
		t.Helper()
		hw, st, err := b.HighWater(ctx, "j!pause!default")
		mustNil(t, err, "HighWater")
		return hw, st
	}
	paused := func(s *schedule.Scheduler, want bool, when string) {
		t.Helper()
		got, err := s.Paused(ctx, "j")
		mustNil(t, err, "Paused")
		if got != want {
			t.Errorf("%s: Paused(j) = %v, want %v", when, got, want)
		}
	}
	run("first", func(s *schedule.Scheduler) { paused(s, false, "a new job") })
	fence, st := legacyState()
	if st != "paused" {
		t.Fatalf("a job new to this release is not fenced off for the earlier release: its state there is %q", st)
	}
	// Rolled back: the earlier release's tools lift the fence and pause the
	// job again, and its trigger key k is used there.
	legacyRun(t, ctx, b, "j!pause!default", fence.Add(time.Second), "resumed", backend.Succeeded, "", "")
	legacyRun(t, ctx, b, "j!pause!default", fence.Add(2*time.Second), "paused", backend.Succeeded, "", "")
	legacyRun(t, ctx, b, "j!trigger!k", time.UnixMilli(1), "", backend.Succeeded, "", "")
	run("second", func(s *schedule.Scheduler) {
		paused(s, true, "upgraded again after a pause made with the earlier release")
		mustNil(t, s.Resume(ctx, "j"), "Resume")
		if _, err := s.TriggerRun(ctx, "j", "k"); !errors.Is(err, backend.ErrOccurrenceClaimed) {
			t.Errorf("TriggerRun of a key used with the earlier release during a rollback = %v, want ErrClaimed", err)
		}
	})
	if _, st := legacyState(); st != "paused" {
		t.Errorf("after the second upgrade the earlier release reads j as %q, want paused", st)
	}
	// Rolled back again: resumed there, then upgraded: resumed, and fenced.
	hw, _ := legacyState()
	legacyRun(t, ctx, b, "j!pause!default", hw.Add(time.Second), "resumed", backend.Succeeded, "", "")
	run("third", func(s *schedule.Scheduler) {
		paused(s, false, "upgraded again after a resume made with the earlier release")
	})
	if hw2, st := legacyState(); st != "paused" || !hw2.After(hw.Add(time.Second)) {
		t.Errorf("after the third upgrade the earlier release reads j as %q at %v, want fenced again (paused after %v)", st, hw2, hw.Add(time.Second))
	}
}
