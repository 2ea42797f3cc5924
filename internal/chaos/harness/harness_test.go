package harness_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/checker"
	"github.com/leasehold/leasehold/internal/chaos/harness"
)

// A worker is this test binary started again with harness.EnvWorker set.
func TestMain(m *testing.M) {
	if code, ok := harness.WorkerFromEnv(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func workerCommand(env []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	return cmd
}

// chaosDuration is the fault phase of each backend's run: 15 s (every
// fault is applied at least once even if that takes longer), or
// $LEASEHOLD_CHAOS_DURATION.
func chaosDuration(t *testing.T) time.Duration {
	if v := os.Getenv("LEASEHOLD_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LEASEHOLD_CHAOS_DURATION %q: %v", v, err)
		}
		return d
	}
	return 15 * time.Second
}

func seed(t *testing.T) uint64 {
	if v := os.Getenv("LEASEHOLD_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LEASEHOLD_CHAOS_SEED %q: %v", v, err)
		}
		return s
	}
	return 1
}

// run runs the harness and the checker, keeping the run's files in
// $LEASEHOLD_CHAOS_OUT/<name> if set (else a temp dir).
func run(t *testing.T, cfg harness.Config) *checker.Report {
	t.Helper()
	cfg.Out = t.TempDir()
	if d := os.Getenv("LEASEHOLD_CHAOS_OUT"); d != "" {
		cfg.Out = filepath.Join(d, filepath.Base(t.Name()))
	}
	cfg.WorkerCommand, cfg.TB = workerCommand, t
	if cfg.Seed == 0 {
		cfg.Seed = seed(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+2*time.Minute)
	defer cancel()
	if _, err := harness.Execute(ctx, cfg); err != nil {
		t.Fatalf("harness: %v", err)
	}
	r, err := checker.Check(cfg.Out, checker.Options{})
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	t.Log("\n" + r.Summary())
	t.Logf("files in %s", cfg.Out)
	return r
}

// TestChaos runs every backend through every fault for chaosDuration and
// checks the history: no failure (0 duplicates at the fenced sink and 0
// token regressions for a backend that declares SafeFencing, no overlapping
// grant, a linearizable lease history), every fault applied, and — for a
// backend that does not declare durable fencing — the anomaly predicted
// for a restart of its server.
func TestChaos(t *testing.T) {
	for _, kind := range harness.Kinds() {
		t.Run(kind, func(t *testing.T) {
			r := run(t, harness.Config{Backend: kind, Instances: 5, Duration: chaosDuration(t)})
			applied := map[string]bool{}
			for _, f := range r.Run.Applied {
				applied[f.Kind] = true
			}
			for _, f := range r.Run.Faults {
				if !applied[f] {
					t.Errorf("fault %s was never applied", f)
				}
			}
			if !r.Pass {
				t.Errorf("checker failures: %v", r.Failures)
			}
			if r.Expected == 0 || r.Ran == 0 {
				t.Errorf("no occurrences ran (%d expected)", r.Expected)
			}
			if r.FencedRejected == 0 && r.UnfencedDuplicates == 0 {
				t.Errorf("no stale write at all (nothing rejected by the fenced sink, no duplicate in the unfenced log): the faults did not bite")
			}
			caps := r.Run.Capabilities
			if applied[harness.FaultRestartBackend] && !caps.DurableFencing {
				var across int
				for _, g := range r.Regressions {
					if g.AcrossRestart {
						across++
					}
				}
				if across == 0 {
					t.Errorf("%s declares DurableFencing=false and was restarted, but no token regressed across the restart", caps.Name)
				}
			}
		})
	}
}

// TestControlPauseRetry: pauses aimed at workers in the middle of a run,
// crash policy retry. The unfenced log must show occurrences that took
// effect twice — the paused runner woke and wrote after its occurrence was
// reclaimed and run again — and the fenced sink must have kept one effect
// of each: proof that the fault took effect and that fencing caught it.
//
// It runs on Redis, not SQLite: a process paused inside a SQLite write
// transaction holds the database's write lock, so no other instance can
// reclaim until it wakes — and then the stale runner writes first.
func TestControlPauseRetry(t *testing.T) {
	r := run(t, harness.Config{Backend: "redis", Instances: 3, Duration: 8 * time.Second, Faults: []string{harness.FaultPause}})
	if r.UnfencedDuplicates == 0 {
		t.Fatalf("the unfenced log shows no duplicate effect: the pauses did not take effect")
	}
	if r.CaughtByFencing == 0 || r.FencedRejected == 0 {
		t.Fatalf("the fenced sink caught none of the %d duplicates", r.UnfencedDuplicates)
	}
	if !r.Pass {
		t.Fatalf("checker failures: %v", r.Failures)
	}
}

// TestControlBrokenBackend: the negative control. A backend with owner
// checks off and a token counter that resets on release, run through the
// same harness, must be flagged by the checker.
func TestControlBrokenBackend(t *testing.T) {
	r := run(t, harness.Config{Backend: "sqlite", Broken: true, Instances: 3, Duration: 8 * time.Second,
		Faults: []string{harness.FaultPause, harness.FaultKill}})
	if r.Pass {
		t.Fatalf("the checker passed a deliberately broken backend")
	}
	if len(r.Regressions) == 0 {
		t.Errorf("no token regression reported for a counter that resets on release")
	}
	if r.Linearizable != "Illegal" {
		t.Errorf("linearizability: %s, want Illegal", r.Linearizable)
	}
}
