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

// TestRefusalIsSaidWhereAndFor: an instance that refuses its version says
// so in the ledger, for every instance to read (ReadRefusals): at once,
// and again while it refuses, so that it is still listed long after the
// first statement; once it stops (shut down here, or reloaded), it drops
// out within RefusalFresh. Virtual time: minutes pass in a bubble.
func TestRefusalIsSaidWhereAndFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		l := schedule.NamespaceLedger(b, "default")
		mk := func(instance, spec string) *schedule.Scheduler {
			s := newScheduler(t, b, instance)
			if err := s.Register(schedule.Job{Name: "job", Schedule: spec, Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
				t.Fatal(err)
			}
			start(t, s)
			return s
		}
		read := func() []schedule.Refusal {
			t.Helper()
			r, err := schedule.ReadRefusals(context.Background(), l, "job", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := mk("first", "@every 1h")
		waitFor(t, 5*time.Second, "the first version recorded", func() bool { return len(versionRecords(t, l, "job")) == 1 })
		second := mk("second", "@every 2h")
		waitFor(t, 5*time.Second, "the second version recorded", func() bool { return len(versionRecords(t, l, "job")) == 2 })
		_ = first.Shutdown(context.Background())
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals before any: %+v", r)
		}
		oldSpec, _ := schedule.Parse("@every 1h", "")
		reverted := mk("reverted", "@every 1h")
		waitFor(t, 10*time.Second, "the revert refused", func() bool {
			js := reverted.JobStatuses(0)
			return len(js) == 1 && js[0].VersionRefused
		})
		r := read()
		if len(r) != 1 || r[0].Instance != "reverted" || r[0].Version != oldSpec.Version() || r[0].Spec != "@every 1h" {
			t.Fatalf("refusals at once: %+v; want reverted refusing %s (@every 1h)", r, oldSpec.Version())
		}
		// Said again while it refuses: still listed, said recently, long
		// after RefusalFresh.
		time.Sleep(2*schedule.RefusalFresh + time.Second)
		synctest.Wait()
		r = read()
		if len(r) != 1 || r[0].Instance != "reverted" || time.Since(r[0].At) > schedule.RefusalFresh/2 {
			t.Fatalf("refusals %v later: %+v; want reverted, said within %v", 2*schedule.RefusalFresh, r, schedule.RefusalFresh/2)
		}
		_ = reverted.Shutdown(context.Background())
		_ = second.Shutdown(context.Background())
		time.Sleep(schedule.RefusalFresh + time.Second)
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals %v after the refusing instance stopped: %+v", schedule.RefusalFresh, r)
		}
	})
}
