package schedule_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestRefusedVersionRunsNothing (found by review; the bug it shows): an instance restarted with an
// old config is refused ("claims nothing for the job once the newer
// version applies", README) — yet it still runs the job with its old
// function through two doors that skip versionAllows: a Trigger sent to it
// (the admin API may route to any instance), and the sweeper's reclaim of
// an occurrence of the new version whose runner died (and with Retry,
// every retry of a failed run is such a reclaim). The reclaim even records
// the refused version on the occurrence.
//
// It runs in a synctest bubble: the wait for the new version's switch and
// the second the dead runner's lease is left to lapse are virtual time, so
// the refused instance's sweeper (every 50 ms) surely ran through it.
func TestRefusedVersionRunsNothing(t *testing.T) {
	synctest.Test(t, refusedVersionRunsNothing)
}

// refusedVersionRunsNothing is TestRefusedVersionRunsNothing inside its
// bubble.
func refusedVersionRunsNothing(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	l := schedule.NamespaceLedger(b, "default")
	fx := newEffects()
	mk := func(instance, spec string) *schedule.Scheduler {
		s := newScheduler(t, b, instance)
		if err := s.Register(schedule.Job{Name: "job", Schedule: spec, LeaseTTL: 200 * time.Millisecond,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		return s
	}
	oldSpec, _ := schedule.Parse("@every 1h", "")
	newSpec, _ := schedule.Parse("@every 2h", "")
	old := mk("old", "@every 1h")
	waitFor(t, 5*time.Second, "old version recorded", func() bool { return len(versionRecords(t, l, "job")) == 1 })
	newer := mk("new", "@every 2h")
	waitFor(t, 5*time.Second, "new version recorded", func() bool { return len(versionRecords(t, l, "job")) == 2 })
	waitFor(t, 10*time.Second, "past the settle time (1 s) of the new version's record", func() bool {
		recs, err := l.ListRuns(context.Background(), backend.RunFilter{Job: "job!version"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.SpecVersion == newSpec.Version() && time.Since(r.ClaimedAt) > time.Second {
				return true
			}
		}
		return false
	})
	_ = old.Shutdown(context.Background())
	_ = newer.Shutdown(context.Background())
	restarted := mk("old-again", "@every 1h")
	waitFor(t, 10*time.Second, "the restarted old instance reports the refusal", func() bool {
		js := restarted.JobStatuses(0)
		return len(js) == 1 && js[0].VersionRefused
	})

	// 1. A trigger on the refused instance.
	if r, err := restarted.TriggerRun(context.Background(), "job", "k1"); err == nil {
		waitFor(t, 5*time.Second, "triggered run ran", func() bool { return len(fx.get(r.ScheduledAt)) > 0 })
		t.Errorf("the refused instance (old spec %s, current %s) ran a triggered run of the job with its old function: %+v",
			oldSpec.Version(), newSpec.Version(), fx.get(r.ScheduledAt)[0])
	}

	// 2. An occurrence of the new version whose runner died.
	x := newSpec.Next(time.Now())
	if _, err := l.Claim(context.Background(), backend.ClaimRequest{Job: "job", ScheduledAt: x, SpecVersion: newSpec.Version(),
		Owner: backend.Owner{Instance: "dead", Nonce: backend.NewNonce()}, TTL: 50 * time.Millisecond, MaxEarly: 3 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // virtual: expired, and the refused instance swept (every 50 ms) past it many times
	synctest.Wait()
	if got := fx.get(x); len(got) > 0 {
		rec, _ := l.GetRun(context.Background(), "job", x)
		t.Errorf("the refused instance reclaimed occurrence %s of the new version and ran its old function (attempt %d on %s); the ledger now records version %q (refused is %q)",
			x.Format(time.RFC3339), got[0].Attempt, got[0].Instance, rec.SpecVersion, oldSpec.Version())
	}
}

// TestRefusalIsSaidWhereAndFor: an instance that refuses its version
// states it for every instance to read (ReadRefusals) for as long as it
// refuses — hours later still — and withdraws it when it stops refusing:
// a reload with the current spec, a removal of the job, a shutdown. A
// restarted process with the current config states nothing. Virtual time:
// hours pass in a bubble.
func TestRefusalIsSaidWhereAndFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		l := schedule.NamespaceLedger(b, "default")
		job := func(spec string) schedule.Job {
			return schedule.Job{Name: "job", Schedule: spec, Func: func(context.Context, schedule.Run) error { return nil }}
		}
		mk := func(instance, spec string) *schedule.Scheduler {
			s := newScheduler(t, b, instance)
			if err := s.Register(job(spec)); err != nil {
				t.Fatal(err)
			}
			start(t, s)
			return s
		}
		read := func() []schedule.Refusal {
			t.Helper()
			r, err := schedule.ReadRefusals(context.Background(), b, "default", "job")
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		refused := func(s *schedule.Scheduler) bool {
			js := s.JobStatuses(0)
			return len(js) == 1 && js[0].VersionRefused
		}
		first := mk("first", "@every 1h")
		waitFor(t, 5*time.Second, "the first version recorded", func() bool { return len(versionRecords(t, l, "job")) == 1 })
		second := mk("second", "@every 2h")
		defer second.Shutdown(context.Background())
		waitFor(t, 5*time.Second, "the second version recorded", func() bool { return len(versionRecords(t, l, "job")) == 2 })
		_ = first.Shutdown(context.Background())
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals before any: %+v", r)
		}
		oldSpec, _ := schedule.Parse("@every 1h", "")
		stated := func() bool {
			r := read()
			return len(r) == 1 && r[0].Instance == "eu/reverted" && r[0].Version == oldSpec.Version()
		}
		reverted := mk("eu/reverted", "@every 1h") // an instance name may hold "/"
		waitFor(t, 10*time.Second, "the revert refused and stated", func() bool { return refused(reverted) && stated() })
		time.Sleep(5 * time.Hour)
		synctest.Wait()
		if !stated() {
			t.Fatalf("refusals hours later: %+v; want eu/reverted refusing %s", read(), oldSpec.Version())
		}
		// Another job whose name extends this one's shows none of it.
		if r, err := schedule.ReadRefusals(context.Background(), b, "default", "job/eu"); err != nil || len(r) != 0 {
			t.Fatalf("refusals of job/eu: %+v, %v", r, err)
		}
		// A reload with the current spec withdraws it.
		if err := reverted.Replace(job("@every 2h")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the refusal withdrawn by the reload", func() bool { return len(read()) == 0 })
		// Refused again by a reload; withdrawn by a removal of the job.
		if err := reverted.Replace(job("@every 1h")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "refused again", func() bool { return refused(reverted) && stated() })
		if err := reverted.Remove("job"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the refusal withdrawn by the removal", func() bool { return len(read()) == 0 })
		// Refused once more; withdrawn by the shutdown; a restart with the
		// current config states nothing.
		if err := reverted.Register(job("@every 1h")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "refused once more", func() bool { return refused(reverted) && stated() })
		_ = reverted.Shutdown(context.Background())
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals after the refusing instance shut down: %+v", r)
		}
		restarted := mk("eu/reverted", "@every 2h")
		time.Sleep(time.Minute)
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals after a restart with the current config: %+v", r)
		}
		_ = restarted.Shutdown(context.Background())
	})
}
