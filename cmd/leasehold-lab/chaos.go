package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos/checker"
	"github.com/leasehold/leasehold/internal/chaos/harness"
)

// ExitChaosFailed: "leasehold-lab chaos" ran, and the checker found an
// invariant violated (or the negative control was not caught).
const ExitChaosFailed = 1

func newChaosCmd(a *app) *cobra.Command {
	var (
		instances  int
		duration   time.Duration
		faults     string
		seed       uint64
		out        string
		broken     bool
		backendArg string
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run worker processes against a backend under injected faults and check the history",
		Long: `Start --instances worker processes running the real scheduler and locker
against one backend — a job every 100 ms in once mode (crash policy retry)
and a lock workload — and, for --duration, apply faults drawn from --seed:

  kill             kill -9 a worker (it is started again)
  pause            SIGSTOP a worker in the middle of a job run past its lease TTL, then SIGCONT
  partition        cut a worker from the backend through its own TCP proxy (black hole,
                   or replies delayed by the TTL)
  restart-backend  stop (SIGTERM or SIGKILL) and start the backend server
  clock-skew       run a worker's scheduler clock 10–50 % fast or slow

Every worker records what it did (acquire/renew/release, claims, runs, effects)
on the host's CLOCK_MONOTONIC. Effects go to a fenced sink, which rejects a
token lower than one it has seen, and to an unfenced log. The checker then
reports duplicates at the fenced sink, missed occurrences, overlapping grants,
stale holders caught by the sink, token regressions and linearizability
(porcupine, with a lease model that knows expiry), judged against the
backend's declared capabilities. It writes report.txt, report.json,
report.html and timeline.html to --out.

--backend is a kind — ` + strings.Join(harness.Kinds(), ", ") + ` — for
which a private server is started from the binaries installed on this host
(restart-backend needs one), or the URL of a running backend (one endpoint,
since each worker reaches it through its own proxy; memory serves one
process and redlock has N endpoints, so neither runs here).

Exit status 0 if no invariant was violated, 1 if one was, 64 for bad usage.`,
		Example: `  leasehold-lab chaos --backend redis --instances 5 --duration 60s --seed 7 --out /tmp/chaos-redis
  leasehold-lab chaos --backend sqlite --faults kill,pause,clock-skew --duration 30s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			backendURL := backendArg
			if backendURL == "" {
				return usageErrorf("--backend is required: a kind (%s) or a URL", strings.Join(harness.Kinds(), ", "))
			}
			fs, err := parseFaults(faults)
			if err != nil {
				return err
			}
			if duration <= 0 {
				return usageErrorf("--duration %v: must be positive", duration)
			}
			if instances < 2 || instances > 64 {
				return usageErrorf("--instances %d: must be within 2..64", instances)
			}
			if out == "" {
				if out, err = os.MkdirTemp("", "leasehold-chaos-"); err != nil {
					return err
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg := harness.Config{Backend: backendURL, Broken: broken, Instances: instances, Duration: duration,
				Faults: fs, Seed: seed, Out: out, Log: a.stderr,
				WorkerCommand: func(env []string) *exec.Cmd {
					c := exec.Command(exe, "chaos", "worker")
					c.Env = env
					return c
				}}
			if _, err := harness.Execute(ctx, cfg); err != nil {
				if errors.Is(err, backend.ErrInvalid) {
					return &exitError{code: ExitUsage, err: err}
				}
				return &exitError{code: ExitInternal, err: err}
			}
			return a.chaosCheck(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&backendArg, "backend", "", "backend `kind or URL`: "+strings.Join(harness.Kinds(), ", ")+", or the URL of a running backend")
	f.IntVar(&instances, "instances", 5, "worker processes")
	f.DurationVar(&duration, "duration", 60*time.Second, "how long faults are applied")
	f.StringVar(&faults, "faults", strings.Join(harness.AllFaults(), ","), "comma-separated faults to draw from")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault schedule")
	f.StringVar(&out, "out", "", "directory for the history and reports (default: a new temp dir)")
	f.BoolVar(&broken, "negative-control", false, "wrap the backend in a deliberately broken one (owner checks off, token counter reset on release): the checker must fail the run")

	cmd.AddCommand(&cobra.Command{
		Use:    "worker",
		Short:  "One chaos worker (started by leasehold-lab chaos)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, ok := harness.WorkerFromEnv()
			if !ok {
				return usageErrorf("chaos worker is started by leasehold-lab chaos ($%s is not set)", harness.EnvWorker)
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "check DIR",
		Short: "Check the history of an earlier chaos run again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.chaosCheck(args[0])
		},
	})
	return cmd
}

func parseFaults(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		known := false
		for _, k := range harness.AllFaults() {
			known = known || k == f
		}
		if !known {
			return nil, usageErrorf("--faults: %q is not a fault (known: %s)", f, strings.Join(harness.AllFaults(), ", "))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return []string{}, nil // no faults: a calm run
	}
	return out, nil
}

func (a *app) chaosCheck(dir string) error {
	r, err := checker.Check(dir, checker.Options{})
	if err != nil {
		return &exitError{code: ExitInternal, err: err}
	}
	fmt.Fprint(a.stdout, r.Summary())
	fmt.Fprintf(a.stdout, "  reports: %s\n", filepath.Join(dir, checker.ReportHTML))
	if !r.Pass {
		return &exitError{code: ExitChaosFailed}
	}
	return nil
}
