package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// earlierRelease is the manifest of testdata/earlier-release: a SQLite
// ledger written by the release before the record store (commit b69d763,
// with mkfixture.go), which kept job metadata as runs of the ledger.
type earlierRelease struct {
	Commit       string `json:"commit"`
	SpecVersions []struct {
		Namespace, Job, Spec, Version string
		Current                       bool
	} `json:"spec_versions"`
	Metadata []struct {
		Name string       `json:"name"`
		Runs []earlierRun `json:"runs"`
	} `json:"metadata"`
}

// earlierRun is a run of job metadata in the manifest.
type earlierRun struct {
	ScheduledAt time.Time `json:"scheduled_at"`
	SpecVersion string    `json:"spec_version"`
	State       string    `json:"state"`
	Token       uint64    `json:"token"`
	Result      string    `json:"result"`
	Error       string    `json:"error"`
}

// TestCarryOverOfADatabaseWrittenByTheEarlierRelease opens a copy of a
// database the earlier release wrote (schedule versions and a superseded
// mark, pause states, used, refused and blocking trigger keys, a retried
// attempt, a second namespace) with Schedulers of this release, and checks
// that every piece of metadata reads as the earlier release left it, and
// that the earlier release is fenced off (docs/records.md, "Upgrading").
func TestCarryOverOfADatabaseWrittenByTheEarlierRelease(t *testing.T) {
	dir := filepath.Join("testdata", "earlier-release")
	raw, err := os.ReadFile(filepath.Join(dir, "earlier-release.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m earlierRelease
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(filepath.Join(dir, "earlier-release.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, db, 0o600); err != nil { // the backend refuses a file others may read
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("opening the earlier release's database: %v", err)
	}
	defer b.Close()

	spec := map[[2]string]string{} // namespace, job → current spec
	var replaced string            // report's replaced spec in namespace default
	for _, v := range m.SpecVersions {
		if v.Current {
			spec[[2]string{v.Namespace, v.Job}] = v.Spec
		} else if v.Job == "report" && v.Namespace == "default" {
			replaced = v.Spec
		}
	}
	runsOf := func(name string) []earlierRun {
		for _, x := range m.Metadata {
			if x.Name == name {
				return x.Runs
			}
		}
		t.Fatalf("the manifest has no metadata named %q", name)
		return nil
	}
	nop := func(context.Context, schedule.Run) error { return nil }
	start := func(instance, ns string, jobs ...string) *schedule.Scheduler {
		t.Helper()
		s, err := schedule.New(b, schedule.WithInstance(instance), schedule.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if err := s.Register(schedule.Job{Name: j, Schedule: spec[[2]string{ns, j}], Func: nop, MaxConcurrent: 1}); err != nil {
				t.Fatalf("Register %s: %v", j, err)
			}
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		select {
		case <-s.StartedUp():
		case <-ctx.Done():
			t.Fatalf("%s did not start up", instance)
		}
		return s
	}
	s := start("upgraded", "default", "report", "sync", "mail", "flaky")

	for job, want := range map[string]bool{"report": true, "sync": false, "mail": false, "flaky": false} {
		if got, err := s.Paused(ctx, job); err != nil || got != want {
			t.Errorf("Paused(%s) = %v, %v; want %v, as the earlier release left it", job, got, err, want)
		}
	}
	l := schedule.NamespaceLedger(b, "default")
	vs, err := schedule.ReadVersions(ctx, l, "report")
	if err != nil {
		t.Fatal(err)
	}
	want := runsOf("report!version") // newest first
	if len(vs) != len(want) {
		t.Fatalf("report's versions: %+v, want %d", vs, len(want))
	}
	for i, w := range want {
		if vs[i].Version != w.SpecVersion || !vs[i].From.Equal(w.ScheduledAt) || vs[i].Spec != w.Result {
			t.Errorf("report's version %d: %+v, want %s from %v (%q)", i, vs[i], w.SpecVersion, w.ScheduledAt, w.Result)
		}
	}
	for _, job := range []string{"report", "sync", "mail", "flaky"} {
		if _, st, err := b.HighWater(ctx, job+"!pause!default"); err != nil || st != "paused" {
			t.Errorf("job %s's pause state where the earlier release reads it: %q, %v; want paused (the fence)", job, st, err)
		}
	}
	for key, want := range map[string]error{"k-used": backend.ErrOccurrenceClaimed, "k-block": backend.ErrOccurrenceClaimed, "k-refused": nil} {
		if _, err := s.TriggerRun(ctx, "sync", key); want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("TriggerRun(sync, %s) = %v, want %v", key, err, want)
		}
	}
	if _, err := s.TriggerRun(ctx, "sync", "k-refused"); !errors.Is(err, backend.ErrOccurrenceClaimed) {
		t.Errorf("TriggerRun(sync, k-refused) a second time = %v, want ErrClaimed", err)
	}
	att := runsOf("flaky!attempt!1")[0]
	a, err := schedule.ReadAttempt(ctx, l, "flaky", 1, att.ScheduledAt)
	if err != nil || a.State != backend.Failed || a.Error != att.Error || a.Result != att.Result || a.SpecVersion != att.SpecVersion {
		t.Errorf("ReadAttempt(flaky, 1) = %+v, %v; want the earlier release's %+v", a, err, att)
	}
	old := start("old-config", "default")
	if err := old.Register(schedule.Job{Name: "report", Schedule: replaced, Func: nop}); err != nil {
		t.Fatal(err)
	}
	refusedEventually(t, old, "report")
	shop := start("upgraded-shop", "shop", "report")
	if got, err := shop.Paused(ctx, "report"); err != nil || !got {
		t.Errorf("Paused(report) in namespace shop = %v, %v; want true", got, err)
	}
}

// refusedEventually waits until s reports job's version refused.
func refusedEventually(t *testing.T, s *schedule.Scheduler, job string) {
	t.Helper()
	eventually.True(t, 30*time.Second, "the replaced version of "+job+", registered again, refused", func() bool {
		for _, st := range s.JobStatuses(0) {
			if st.Name == job && st.VersionRefused {
				return true
			}
		}
		return false
	})
}
