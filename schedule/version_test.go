package schedule_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
	goredis "github.com/redis/go-redis/v9"
)

// TestClaimsResumeAfterLedgerLost: a Redis without persistence restarted
// empty (here: FLUSHALL) loses the job's schedule version with the rest of
// the ledger; the scheduler records it again and goes on claiming, instead
// of waiting forever for a version nobody records.
func TestClaimsResumeAfterLedgerLost(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var runs atomic.Int64
	s := newScheduler(t, b, "i1")
	if err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 100ms",
		Func: func(context.Context, schedule.Run) error { runs.Add(1); return nil }}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 20*time.Second, "3 runs before the data loss", func() bool { return runs.Load() >= 3 })
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	after := runs.Load()
	eventually.True(t, 20*time.Second, "3 runs after the ledger was lost", func() bool { return runs.Load() >= after+3 })
}

// TestRollingSpecChangeNeverRunsBothVersions runs in a synctest bubble: the
// 1 s version settle the switch must wait for, and the 100/150 ms instants
// on either side of it, are virtual time, so the bound is exact.
func TestRollingSpecChangeNeverRunsBothVersions(t *testing.T) {
	synctest.Test(t, rollingSpecChangeNeverRunsBothVersions)
}

// rollingSpecChangeNeverRunsBothVersions is TestRollingSpecChangeNeverRunsBothVersions
// inside its bubble.
func rollingSpecChangeNeverRunsBothVersions(t *testing.T) {
	b := memory.New()
	fx := newEffects()
	mk := func(name, spec string) *schedule.Scheduler {
		s := newScheduler(t, b, name)
		if err := s.Register(schedule.Job{Name: "job", Schedule: spec,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := mk("old", "@every 100ms")
	start(t, old)
	eventually.True(t, 10*time.Second, "old version runs", func() bool { return fx.count() >= 5 })
	newer := mk("new", "@every 150ms")
	switchFrom := time.Now()
	start(t, newer)
	eventually.True(t, 20*time.Second, "new version runs after the switch", func() bool {
		for _, k := range fx.instants() {
			if k%150 == 0 && k%100 != 0 && fx.get(time.UnixMilli(k))[0].Instance == "new" {
				return true
			}
		}
		return false
	})
	eventually.True(t, 5*time.Second, "a few more", func() bool { return fx.count() >= 40 })
	_ = old.Shutdown(context.Background())
	_ = newer.Shutdown(context.Background())
	// Find the switch: the first instant run by the new version.
	var sw int64
	for _, k := range fx.instants() {
		if fx.get(time.UnixMilli(k))[0].Instance == "new" {
			sw = k
			break
		}
	}
	if sw == 0 || time.UnixMilli(sw).Before(switchFrom.Add(time.Second)) {
		t.Fatalf("switch at %v, want at least the settle time (1s) after the new version started at %v", time.UnixMilli(sw), switchFrom)
	}
	for _, k := range fx.instants() {
		runs := fx.get(time.UnixMilli(k))
		if len(runs) != 1 {
			t.Fatalf("instant %d ran %d times", k, len(runs))
		}
		if k < sw && (runs[0].Instance != "old" || k%100 != 0) {
			t.Fatalf("before the switch instant %d ran on %s", k, runs[0].Instance)
		}
		if k >= sw && (runs[0].Instance != "new" || k%150 != 0) {
			t.Fatalf("after the switch instant %d ran on %s", k, runs[0].Instance)
		}
	}
}

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
	eventually.True(t, 5*time.Second, "old version recorded", func() bool { return len(versionRecords(t, l, "job")) == 1 })
	newer := mk("new", "@every 2h")
	eventually.True(t, 5*time.Second, "new version recorded", func() bool { return len(versionRecords(t, l, "job")) == 2 })
	eventually.True(t, 10*time.Second, "past the settle time (1 s) of the new version's record", func() bool {
		recs, err := schedule.ReadVersions(context.Background(), l, "job")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Version == newSpec.Version() && time.Since(r.Recorded) > time.Second {
				return true
			}
		}
		return false
	})
	_ = old.Shutdown(context.Background())
	_ = newer.Shutdown(context.Background())
	restarted := mk("old-again", "@every 1h")
	eventually.True(t, 10*time.Second, "the restarted old instance reports the refusal", func() bool {
		js := restarted.JobStatuses(0)
		return len(js) == 1 && js[0].VersionRefused
	})

	// 1. A trigger on the refused instance.
	if r, err := restarted.TriggerRun(context.Background(), "job", "k1"); err == nil {
		eventually.True(t, 5*time.Second, "triggered run ran", func() bool { return len(fx.get(r.ScheduledAt)) > 0 })
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
