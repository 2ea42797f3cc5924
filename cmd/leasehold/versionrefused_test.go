package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestJobsShowsARefusedVersion: after a deploy replaced a job's schedule,
// "leasehold jobs" with the old config says its version is refused (its
// daemons claim nothing), and with the new config that it is current.
func TestJobsShowsARefusedVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	b, err := open.Open(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	record := func(instance, spec string) string {
		t.Helper()
		s, err := schedule.New(b, schedule.WithInstance(instance), schedule.WithVersionSettle(300*time.Millisecond), schedule.WithClaimTolerance(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(schedule.Job{Name: "report", Schedule: spec, Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(ctx)
		var js schedule.JobStatus
		eventually.True(t, 20*time.Second, instance+"'s version is recorded as current", func() bool {
			js = s.JobStatuses(0)[0]
			return js.CurrentVersion == js.Version
		})
		return js.Version
	}
	oldV := record("old", "@every 1s")
	newV := record("new", "@every 2s")
	conf := func(name, spec string) string {
		p := e.path(name)
		data := fmt.Sprintf("backend: %s\njobs:\n  - name: report\n    schedule: %q\n    command: {argv: [/bin/true]}\n", e.url, spec)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := e.expect(0, "jobs", "--config", conf("old.yaml", "@every 1s"))
	if !strings.Contains(r.stdout, oldV+" REFUSED: superseded by "+newV) {
		t.Fatalf("jobs with the old config does not show the refusal of %s in favour of %s:\n%s", oldV, newV, r.stdout)
	}
	eventually.True(t, 10*time.Second, "the new version's switch instant passes", func() bool {
		r = e.expect(0, "jobs", "--config", conf("new.yaml", "@every 2s"))
		return strings.Contains(r.stdout, newV+" (current)")
	})
	if strings.Contains(r.stdout, "REFUSED") {
		t.Fatalf("jobs with the current config shows a refusal:\n%s", r.stdout)
	}
}
