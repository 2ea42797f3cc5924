package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
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
	eventually.True(t, 10*time.Second, "the triggered run is recorded", func() bool {
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

// TestRunsAndLocksListNoSchedulerState: `leasehold runs` lists runs only —
// not the scheduler's records of a job's versions, pause state and trigger
// keys, nor the runs under their names ("<job>!…", many dated 1970) in
// which an earlier release kept them — and refuses such a name as --job; `leasehold locks` marks a daemon's
// instance lease as kind "instance", apart from users' locks.
func TestRunsAndLocksListNoSchedulerState(t *testing.T) {
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
	if err := s.Register(schedule.Job{Name: "tick", Schedule: "@yearly", Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	run, err := s.TriggerRun(ctx, "tick", "k1")
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the triggered run is recorded", func() bool {
		r, err := b.GetRun(ctx, "tick", run.ScheduledAt)
		return err == nil && r.State == backend.Succeeded
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	for _, meta := range []string{"tick!version", "tick!pause!default", "tick!trigger!k1"} {
		if rs, err := b.ListRecords(ctx, backend.ListRecordsRequest{Name: meta}); err != nil || len(rs) == 0 {
			t.Fatalf("the record store holds no %s record (%v): the test shows nothing", meta, err)
		}
	}
	// An earlier release kept such records as runs of the ledger, at the
	// epoch; one is left here as it left them (docs/records.md).
	o := backend.Owner{Instance: "earlier", Nonce: backend.NewNonce()}
	old, err := b.Claim(ctx, backend.ClaimRequest{Job: "tick!trigger!k0", ScheduledAt: time.UnixMilli(1), Owner: o, TTL: time.Minute, MaxEarly: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(ctx, backend.FinishRequest{Job: "tick!trigger!k0", ScheduledAt: time.UnixMilli(1), Owner: o, Token: old.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatal(err)
	}

	var rows []runInfo
	out := e.expect(0, "runs", "--json").stdout
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("runs --json: %v: %s", err, out)
	}
	if len(rows) != 1 || rows[0].Job != "tick" || rows[0].Trigger != "k1" {
		t.Fatalf("runs --json = %+v, want the one triggered run of tick", rows)
	}
	for _, r := range rows {
		if strings.Contains(r.Job, "!") || strings.HasPrefix(r.ScheduledAt, "1970") {
			t.Fatalf("runs lists scheduler state: %+v", r)
		}
	}
	if text := e.expect(0, "runs").stdout; strings.Contains(text, "!") || strings.Contains(text, "1970") {
		t.Fatalf("runs lists scheduler state:\n%s", text)
	}
	if r := e.expect(ExitUsage, "runs", "--job", "tick!version"); !strings.Contains(r.stderr, `--job "tick!version"`) {
		t.Fatalf("runs --job tick!version: %s, want a usage error naming the value", r.stderr)
	}

	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("d1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"instances/d1", "work"} {
		l, err := lk.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	var locks []lockInfo
	out = e.expect(0, "locks", "--json").stdout
	if err := json.Unmarshal([]byte(out), &locks); err != nil {
		t.Fatalf("locks --json: %v: %s", err, out)
	}
	kinds := map[string]string{}
	for _, l := range locks {
		kinds[l.Key] = l.Kind
	}
	if len(kinds) != 2 || kinds["instances/d1"] != "instance" || kinds["work"] != "lock" {
		t.Fatalf("locks --json kinds = %v, want instances/d1 an instance lease and work a lock", kinds)
	}
	if text := e.expect(0, "locks").stdout; !strings.Contains(text, "KIND") || !strings.Contains(text, "instance") {
		t.Fatalf("locks does not mark the instance lease:\n%s", text)
	}
}
