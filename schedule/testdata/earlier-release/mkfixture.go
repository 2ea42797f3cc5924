//go:build ignore

// mkfixture writes a SQLite ledger holding job metadata of every kind as
// this release (b69d763) writes it — schedule versions and a superseded
// mark, pause states, trigger-key markers (used, refused, blocking), a
// retried attempt's record, in the default namespace and in "shop" — and a
// JSON manifest of what the ledger holds, for a later release to test
// carrying it over. It uses the schedule package's public API only; the
// manifest is read through the backend's Ledger (ListRuns, HighWater).
//
//	go run ./schedule/testdata/earlier-release/mkfixture.go -out /tmp/fixture/earlier-release.db
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/schedule"
)

const (
	specReportV1 = "0 3 * * *"  // report's first version
	specReportV2 = "30 4 * * *" // report's second version (Replace)
	specSync     = "0 5 * * *"
	specMail     = "0 6 * * *"
	specFlaky    = "0 7 * * *"
	instDefault  = "fixture-default"
	instShop     = "fixture-shop"
)

type runJSON struct {
	Job         string `json:"job"`
	ScheduledAt string `json:"scheduled_at"`
	SpecVersion string `json:"spec_version"`
	State       string `json:"state"`
	Owner       string `json:"owner_instance"`
	Token       uint64 `json:"token"`
	Attempt     int    `json:"attempt"`
	Result      string `json:"result"`
	Error       string `json:"error"`
}

type nameJSON struct {
	Name             string    `json:"name"` // ledger name (LedgerJob applied)
	HighWater        string    `json:"high_water"`
	HighWaterVersion string    `json:"high_water_version"`
	Runs             []runJSON `json:"runs"` // ListRuns order: newest first
}

type specJSON struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Spec      string `json:"spec"`
	Version   string `json:"version"`
	Current   bool   `json:"current"`
}

type manifest struct {
	Commit      string     `json:"commit"`
	WrittenAt   string     `json:"written_at"`
	Instances   []string   `json:"instances"`
	Specs       []specJSON `json:"spec_versions"`
	Metadata    []nameJSON `json:"metadata"` // every ledger name holding metadata (contains backend.MetaSep)
	Jobs        []nameJSON `json:"jobs"`     // the plain job names that hold runs (triggered runs)
	AttemptKeys []string   `json:"attempt_keys"`
}

func main() {
	out := flag.String("out", "/tmp/fixture/earlier-release.db", "database file to create (removed first)")
	manifestPath := flag.String("manifest", "", "manifest path (default: -out with .json)")
	flag.Parse()
	if *manifestPath == "" {
		*manifestPath = strings.TrimSuffix(*out, filepath.Ext(*out)) + ".json"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, *out, *manifestPath); err != nil {
		log.Fatal(err)
	}
}

func version(spec string) string {
	s, err := schedule.Parse(spec, "")
	if err != nil {
		panic(err)
	}
	return s.Version()
}

// waitFor polls cond until it reports true, an error, or the deadline.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: timed out", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func finished(ctx context.Context, l backend.Ledger, name string, want int) func() (bool, error) {
	return func() (bool, error) {
		rs, err := l.ListRuns(ctx, backend.RunFilter{Job: name})
		if err != nil || len(rs) < want {
			return false, err
		}
		for _, r := range rs {
			if r.State == backend.Running {
				return false, nil
			}
		}
		return true, nil
	}
}

func run(ctx context.Context, out, manifestPath string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	for _, p := range []string{out, out + "-wal", out + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	b, err := sqlite.Open(ctx, out)
	if err != nil {
		return err
	}
	defer b.Close()
	l, err := backend.LedgerOf(b)
	if err != nil {
		return err
	}

	// ---- namespace "default" ----
	noop := func(context.Context, schedule.Run) error { return nil }
	var syncCalls atomic.Int32
	blockStarted, release := make(chan struct{}), make(chan struct{})
	syncFn := func(ctx context.Context, r schedule.Run) error {
		if syncCalls.Add(1) == 1 { // the "k-block" run holds the slot
			close(blockStarted)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			r.Report("blocked, then released")
			return nil
		}
		r.Report("synced")
		return nil
	}
	flakyFn := func(_ context.Context, r schedule.Run) error {
		if r.Attempt == 1 {
			r.Report("attempt 1 output")
			return errors.New("first attempt failed")
		}
		r.Report("second attempt ok")
		return nil
	}
	sd, err := schedule.New(b, leasehold.WithInstance(instDefault), leasehold.WithNamespace(leasehold.DefaultNamespace), schedule.WithGrace(5*time.Second))
	if err != nil {
		return err
	}
	for _, j := range []schedule.Job{
		{Name: "report", Schedule: specReportV1, Func: noop},
		{Name: "sync", Schedule: specSync, Func: syncFn, MaxConcurrent: 1, LeaseTTL: 2 * time.Second},
		{Name: "mail", Schedule: specMail, Func: noop},
		{Name: "flaky", Schedule: specFlaky, Func: flakyFn, LeaseTTL: time.Second, Retry: schedule.RetryPolicy{Max: 1, Backoff: 100 * time.Millisecond}},
	} {
		if err := sd.Register(j); err != nil {
			return err
		}
	}
	if err := sd.Start(context.Background()); err != nil {
		return err
	}
	select {
	case <-sd.StartedUp():
	case <-time.After(30 * time.Second):
		return errors.New("default scheduler did not start up")
	}
	if err := waitFor(ctx, "report's first version", finished(ctx, l, "report!version", 1)); err != nil {
		return err
	}

	// report: a second schedule version; the first is marked superseded.
	if err := sd.Replace(schedule.Job{Name: "report", Schedule: specReportV2, Func: noop}); err != nil {
		return err
	}
	if err := waitFor(ctx, "report's second version", finished(ctx, l, "report!version", 2)); err != nil {
		return err
	}
	supName := "report!superseded!" + version(specReportV1)
	if err := waitFor(ctx, "the superseded mark "+supName, finished(ctx, l, supName, 1)); err != nil {
		return err
	}

	// Pauses: report paused, sync paused then resumed, mail never.
	if err := sd.Pause(ctx, "report"); err != nil {
		return err
	}
	if err := sd.Pause(ctx, "sync"); err != nil {
		return err
	}
	if err := sd.Resume(ctx, "sync"); err != nil {
		return err
	}

	// Triggers of sync: k-block holds the slot (MaxConcurrent 1), k-refused
	// is refused with the overlap, then k-used runs.
	rBlock, err := sd.TriggerRun(ctx, "sync", "k-block")
	if err != nil {
		return fmt.Errorf("k-block: %w", err)
	}
	select {
	case <-blockStarted:
	case <-time.After(30 * time.Second):
		return errors.New("the k-block run did not start")
	}
	if _, err := sd.TriggerRun(ctx, "sync", "k-refused"); !errors.Is(err, backend.ErrOccurrenceOverlap) {
		return fmt.Errorf("k-refused: want the overlap refusal, got %v", err)
	}
	close(release)
	runDone := func(job string, at time.Time, attempt int) func() (bool, error) {
		return func() (bool, error) {
			r, err := l.GetRun(ctx, job, at)
			if errors.Is(err, backend.ErrNotFound) {
				return false, nil
			}
			return err == nil && r.State == backend.Succeeded && r.Attempt >= attempt, err
		}
	}
	if err := waitFor(ctx, "the k-block run", runDone("sync", rBlock.ScheduledAt, 1)); err != nil {
		return err
	}
	rUsed, err := sd.TriggerRun(ctx, "sync", "k-used")
	if err != nil {
		return fmt.Errorf("k-used: %w", err)
	}
	if err := waitFor(ctx, "the k-used run", runDone("sync", rUsed.ScheduledAt, 1)); err != nil {
		return err
	}

	// flaky: attempt 1 fails and is retried; attempt 2 succeeds.
	rFlaky, err := sd.TriggerRun(ctx, "flaky", "k-flaky")
	if err != nil {
		return fmt.Errorf("k-flaky: %w", err)
	}
	if err := waitFor(ctx, "flaky's second attempt", runDone("flaky", rFlaky.ScheduledAt, 2)); err != nil {
		return err
	}
	if err := waitFor(ctx, "flaky's attempt record", finished(ctx, l, schedule.AttemptKey("flaky", 1), 1)); err != nil {
		return err
	}

	// ---- namespace "shop" ----
	ss, err := schedule.New(b, leasehold.WithInstance(instShop), leasehold.WithNamespace("shop"), schedule.WithGrace(5*time.Second))
	if err != nil {
		return err
	}
	if err := ss.Register(schedule.Job{Name: "report", Schedule: specReportV1, Func: noop}); err != nil {
		return err
	}
	if err := ss.Start(context.Background()); err != nil {
		return err
	}
	select {
	case <-ss.StartedUp():
	case <-time.After(30 * time.Second):
		return errors.New("shop scheduler did not start up")
	}
	if err := waitFor(ctx, "shop report's version", finished(ctx, l, "shop:report!version", 1)); err != nil {
		return err
	}
	if err := ss.Pause(ctx, "report"); err != nil {
		return err
	}

	// Check the states through the public API before shutting down.
	for _, c := range []struct {
		s    *schedule.Scheduler
		job  string
		want bool
	}{{sd, "report", true}, {sd, "sync", false}, {sd, "mail", false}, {sd, "flaky", false}, {ss, "report", true}} {
		p, err := c.s.Paused(ctx, c.job)
		if err != nil || p != c.want {
			return fmt.Errorf("paused(%s) = %v, %v; want %v", c.job, p, err, c.want)
		}
	}

	for _, s := range []*schedule.Scheduler{sd, ss} {
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		err := s.Shutdown(sctx)
		scancel()
		if err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
	}

	// ---- manifest ----
	names := []string{
		"report!version", supName, "report!pause!default",
		"sync!version", "mail!version", "flaky!version",
		"sync!pause!default", "sync!trigger!k-used", "sync!trigger!k-refused", "sync!trigger!k-block",
		"flaky!trigger!k-flaky", schedule.AttemptKey("flaky", 1),
		"shop:report!version", "shop:report!pause!shop",
	}
	m := manifest{
		Commit:      "b69d763",
		WrittenAt:   time.Now().UTC().Format(time.RFC3339Nano),
		Instances:   []string{instDefault, instShop},
		AttemptKeys: []string{schedule.AttemptKey("flaky", 1)},
		Specs: []specJSON{
			{"default", "report", specReportV1, version(specReportV1), false},
			{"default", "report", specReportV2, version(specReportV2), true},
			{"default", "sync", specSync, version(specSync), true},
			{"default", "mail", specMail, version(specMail), true},
			{"default", "flaky", specFlaky, version(specFlaky), true},
			{"shop", "report", specReportV1, version(specReportV1), true},
		},
	}
	read := func(name string) (nameJSON, error) {
		n := nameJSON{Name: name, Runs: []runJSON{}}
		rs, err := l.ListRuns(ctx, backend.RunFilter{Job: name, Limit: 1000})
		if err != nil {
			return n, err
		}
		for _, r := range rs {
			n.Runs = append(n.Runs, runJSON{Job: r.Job, ScheduledAt: r.ScheduledAt.UTC().Format(time.RFC3339Nano), SpecVersion: r.SpecVersion,
				State: string(r.State), Owner: r.Owner.Instance, Token: r.Token, Attempt: r.Attempt, Result: r.Result, Error: r.Error})
		}
		hw, ver, err := l.HighWater(ctx, name)
		if err != nil {
			return n, err
		}
		if !hw.IsZero() {
			n.HighWater = hw.UTC().Format(time.RFC3339Nano)
		}
		n.HighWaterVersion = ver
		return n, nil
	}
	for _, name := range names {
		n, err := read(name)
		if err != nil {
			return err
		}
		if len(n.Runs) == 0 || n.HighWater == "" {
			return fmt.Errorf("%s: no records (runs %d, high water %q)", name, len(n.Runs), n.HighWater)
		}
		m.Metadata = append(m.Metadata, n)
	}
	for _, name := range []string{"sync", "flaky", "report", "mail", "shop:report"} {
		n, err := read(name)
		if err != nil {
			return err
		}
		m.Jobs = append(m.Jobs, n)
	}
	if err := b.Close(); err != nil {
		return err
	}

	// Cross-check the names against the file itself, checkpoint the WAL
	// into it and compact it.
	db, err := sql.Open("sqlite", out)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT job FROM runs UNION SELECT job FROM jobs ORDER BY 1`)
	if err != nil {
		return err
	}
	var inFile []string
	for rows.Next() {
		var j string
		if err := rows.Scan(&j); err != nil {
			return err
		}
		if backend.IsJobMeta(j) {
			inFile = append(inFile, j)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	want := append([]string(nil), names...)
	sort.Strings(want)
	if strings.Join(inFile, ",") != strings.Join(want, ",") {
		return fmt.Errorf("metadata names in the file %q differ from the manifest's %q", inFile, want)
	}
	for _, q := range []string{`PRAGMA wal_checkpoint(TRUNCATE)`, `VACUUM`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	if err := db.Close(); err != nil {
		return err
	}
	// The WAL was checkpointed and truncated: what is left of it is empty.
	for _, p := range []string{out + "-wal", out + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if p == out+"-wal" && fi.Size() != 0 {
			return fmt.Errorf("%s holds %d bytes after the checkpoint", p, fi.Size())
		}
		if err := os.Remove(p); err != nil {
			return err
		}
	}

	js, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(manifestPath, append(js, '\n'), 0o644)
}
