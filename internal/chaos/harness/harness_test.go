package harness_test

import (
	"context"
	"fmt"
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

// chaosDuration is the fault phase of each backend's run: 20 s, or
// $LEASEHOLD_CHAOS_DURATION.
func chaosDuration(t *testing.T) time.Duration {
	if v := os.Getenv("LEASEHOLD_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LEASEHOLD_CHAOS_DURATION %q: %v", v, err)
		}
		return d
	}
	return 20 * time.Second
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

func TestChaosSmoke(t *testing.T) {
	r := run(t, harness.Config{Backend: "sqlite", Instances: 3, Duration: chaosDuration(t)})
	fmt.Println(r.Pass)
}
