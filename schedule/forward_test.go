package schedule_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// versionRecords returns the distinct versions recorded for job, oldest
// first.
func versionRecords(t *testing.T, l backend.Ledger, job string) []string {
	t.Helper()
	recs, err := l.ListRuns(context.Background(), backend.RunFilter{Job: job + "!version"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(recs) - 1; i >= 0; i-- {
		if len(out) == 0 || out[len(out)-1] != recs[i].SpecVersion {
			out = append(out, recs[i].SpecVersion)
		}
	}
	return out
}

// TestOlderSpecCannotTakeBack: a rolling deploy switched job from spec A
// to spec B; an instance restarted with the old config (A) must not record
// A again — it refuses, says so in its job status, and B keeps running.
// With prune, the refusal must survive the loss of the version history.
func TestOlderSpecCannotTakeBack(t *testing.T) {
	for _, prune := range []bool{false, true} {
		name := map[bool]string{false: "history kept", true: "history pruned"}[prune]
		t.Run(name, func(t *testing.T) {
			b := memory.New()
			l := schedule.NamespaceLedger(b, "default")
			fx := newEffects()
			var logs testkit.Buffer
			mk := func(instance, spec string, rev int) *schedule.Scheduler {
				s := newScheduler(t, b, instance, schedule.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				if err := s.Register(schedule.Job{Name: "job", Schedule: spec, Revision: rev,
					Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
					t.Fatal(err)
				}
				return s
			}
			a, _ := schedule.Parse("@every 100ms", "")
			bspec, _ := schedule.Parse("@every 150ms", "")
			old := mk("old", "@every 100ms", 0)
			start(t, old)
			eventually.True(t, 10*time.Second, "A runs", func() bool { return fx.count() >= 3 })
			newer := mk("new", "@every 150ms", 0)
			start(t, newer)
			eventually.True(t, 20*time.Second, "B runs after the switch", func() bool {
				for _, k := range fx.instants() {
					if k%100 != 0 && fx.get(time.UnixMilli(k))[0].Instance == "new" {
						return true
					}
				}
				return false
			})
			if err := old.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if prune {
				if _, err := b.Prune(context.Background(), time.Now().Add(time.Hour), 10000); err != nil {
					t.Fatal(err)
				}
				if got := versionRecords(t, l, "job"); len(got) != 0 {
					t.Fatalf("prune left version records %v", got)
				}
			}
			restarted := mk("old-again", "@every 100ms", 0)
			restartedAt := time.Now()
			start(t, restarted)
			eventually.True(t, 10*time.Second, "the restarted old instance reports the refusal", func() bool {
				js := restarted.JobStatuses(0)
				return len(js) == 1 && js[0].VersionRefused
			})
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "schedule version REFUSED") || !strings.Contains(l, "version="+a.Version()) {
				t.Fatalf("the refusal was not logged as an error by the restarted instance:\n%s", l)
			}
			js := restarted.JobStatuses(0)[0]
			if js.Version != a.Version() || js.CurrentVersion != bspec.Version() {
				t.Fatalf("status version %s current %s, want %s refused in favour of %s", js.Version, js.CurrentVersion, a.Version(), bspec.Version())
			}
			// B keeps running well past the settle time (1 s) after the
			// restart, and no instant of A alone runs after the switch.
			eventually.True(t, 20*time.Second, "B still runs 3 s after the old config restarted", func() bool {
				for _, k := range fx.instants() {
					if time.UnixMilli(k).After(restartedAt.Add(3*time.Second)) && k%150 == 0 && fx.get(time.UnixMilli(k))[0].Instance == "new" {
						return true
					}
				}
				return false
			})
			for _, k := range fx.instants() {
				if time.UnixMilli(k).After(restartedAt) && k%150 != 0 {
					t.Fatalf("instant %d (A's only) ran on %s after B took over", k, fx.get(time.UnixMilli(k))[0].Instance)
				}
			}
			if got := versionRecords(t, l, "job"); len(got) > 0 && got[len(got)-1] != bspec.Version() {
				t.Fatalf("recorded versions %v: the old spec took back", got)
			}
			// A deliberate return to A: a new revision is a new version.
			if err := restarted.Replace(schedule.Job{Name: "job", Schedule: "@every 100ms", Revision: 1,
				Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
				t.Fatal(err)
			}
			eventually.True(t, 10*time.Second, "revision 1 of A is recorded as the current version", func() bool {
				js := restarted.JobStatuses(0)
				return len(js) == 1 && !js[0].VersionRefused && js[0].CurrentVersion == js[0].Version && js[0].Version != a.Version()
			})
		})
	}
}
