package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/schedule"
)

// TestRunsShowTriggeredRuns: a triggered run is in the job's history as
// `leasehold runs` prints it, with its key, token, instant and output.
func TestRunsShowTriggeredRuns(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(e.dir, "leasehold.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := schedule.New(b, schedule.WithInstance("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(schedule.Job{Name: "tick", Schedule: "@yearly",
		Func: func(_ context.Context, r schedule.Run) error { r.Report("hello"); return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	run, err := s.TriggerRun(ctx, "tick", "manual-7")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the triggered run is recorded", func() bool {
		r, err := b.GetRun(ctx, "tick", run.ScheduledAt)
		return err == nil && r.State == backend.Succeeded
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	var rows []runInfo
	out := e.expect(0, "runs", "--job", "tick", "--json").stdout
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("runs --json: %v: %s", err, out)
	}
	if len(rows) != 1 || rows[0].Trigger != "manual-7" || rows[0].Token != run.Token || rows[0].Result != "hello" ||
		rows[0].ScheduledAt != run.ScheduledAt.Format(daemon.InstantFormat) || rows[0].Instance != "t1" {
		t.Fatalf("runs --json = %+v, want the one triggered run %+v with key manual-7 and output hello", rows, run)
	}
	if text := e.expect(0, "runs", "--job", "tick").stdout; !strings.Contains(text, "tick (run now: manual-7)") {
		t.Fatalf("runs does not mark the triggered run:\n%s", text)
	}
}
