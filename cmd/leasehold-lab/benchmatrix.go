package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
	"github.com/leasehold/leasehold/internal/chaos/checker"
	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/open"
)

// newBenchMatrixCmd measures every backend kind this host can run, in one
// run, and writes the backend decision matrix.
func newBenchMatrixCmd(a *app) *cobra.Command {
	var (
		out      string
		kinds    string
		chaosDur time.Duration
		samples  int
		workDir  string
		noChaos  bool
	)
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "Measure every backend (latency, throughput, hand-over, failover RTO, chaos) and write docs/backend-matrix.md",
		Long: `For each backend kind, start a private server (or a SQLite file) and measure,
in one run: acquire latency P50/P99 (uncontended TryAcquire), throughput
(acquire+release cycles per second, 8 goroutines on distinct keys),
hand-over latency (Release by the holder until a blocked Acquire returns),
failover RTO after kill -9 of the holder (a "leasehold lock" process) until a
blocked Acquire returns, at the backend's smallest safe TTL, and RTO after a
SIGKILL and restart of the backend server until an Acquire of a fresh key
succeeds; then a chaos run (leasehold-lab chaos, every fault). The figures are
written as a Markdown table with the command that produced them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ks := harness.Kinds()
			if kinds != "" {
				ks = strings.Split(kinds, ",")
				for _, k := range ks {
					if !slices.Contains(harness.Kinds(), k) {
						return usageErrorf("--backends: %q is not a kind (known: %s)", k, strings.Join(harness.Kinds(), ", "))
					}
				}
			}
			if samples < 3 {
				return usageErrorf("--samples %d: at least 3", samples)
			}
			if workDir == "" {
				d, err := os.MkdirTemp("", "leasehold-matrix-")
				if err != nil {
					return err
				}
				workDir = d
			}
			product, err := a.productBinary(cmd.Context(), filepath.Join(workDir, "bin"))
			if err != nil {
				return err
			}
			var rows []matrixRow
			for _, k := range ks {
				fmt.Fprintf(a.stderr, "matrix: %s\n", k)
				row := a.measureBackend(cmd.Context(), product, k, filepath.Join(workDir, k), samples, chaosDur, noChaos)
				fmt.Fprintf(a.stderr, "matrix: %s: %s\n", k, row.line())
				rows = append(rows, row)
			}
			argv := "leasehold-lab bench matrix"
			if kinds != "" {
				argv += " --backends " + kinds
			}
			argv += fmt.Sprintf(" --samples %d --chaos-duration %v", samples, chaosDur)
			if noChaos {
				argv += " --no-chaos"
			}
			doc := renderMatrix(rows, argv)
			if out == "-" {
				_, err := io.WriteString(a.stdout, doc)
				return err
			}
			if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s (work files in %s)\n", out, workDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "docs/backend-matrix.md", "file to write (- for stdout)")
	f.StringVar(&kinds, "backends", "", "comma-separated kinds (default: "+strings.Join(harness.Kinds(), ",")+")")
	f.DurationVar(&chaosDur, "chaos-duration", 15*time.Second, "fault phase of each backend's chaos run")
	f.IntVar(&samples, "samples", 5, "failover samples per backend (latency uses 60× as many)")
	f.StringVar(&workDir, "dir", "", "directory for servers and chaos runs (default: a new temp dir)")
	f.BoolVar(&noChaos, "no-chaos", false, "skip the chaos runs")
	return cmd
}

type matrixRow struct {
	kind    string
	caps    backend.Capabilities
	ttl     time.Duration
	granted time.Duration // what the backend granted for ttl
	p50     time.Duration
	p99     time.Duration
	tput    float64
	burst   benchkit.SeedResult // the seed's scenario at burstClients
	handP50 time.Duration
	handP99 time.Duration
	rtoKill []time.Duration
	rtoRest []time.Duration
	chaos   string
	err     string
}

// burstClients is the size of the matrix's burst: the seed's scenario
// (each client its own key, 3 tries of 50 ms, 10 ms apart) at 1,000
// clients; bench/ runs it at 10,000 too.
const burstClients = 1000

func (r matrixRow) line() string {
	if r.err != "" {
		return "error: " + r.err
	}
	return fmt.Sprintf("acquire p50 %v p99 %v, %.0f cycles/s, burst %.2f%% p99 %v, hand-over p50 %v, rto kill %v, rto restart %v, chaos %s",
		r.p50, r.p99, r.tput, r.burst.SuccessPct(), r.burst.P99, r.handP50, r.rtoKill, r.rtoRest, r.chaos)
}

func (a *app) measureBackend(ctx context.Context, product, kind, dir string, samples int, chaosDur time.Duration, noChaos bool) (row matrixRow) {
	row.kind = kind
	fail := func(what string, err error) matrixRow {
		row.err = what + ": " + err.Error()
		return row
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("dir", err)
	}
	srv, stop, err := harness.StartServer(kind, dir)
	if err != nil {
		return fail("start server", err)
	}
	defer stop()
	b, err := open.Open(ctx, srv.URL)
	if err != nil {
		return fail("open", err)
	}
	defer b.Close()
	row.caps = b.Capabilities()
	row.ttl = max(time.Second, row.caps.MinTTL)
	ns := fmt.Sprintf("matrix%d", time.Now().UnixNano()%1e9)
	probe := backend.Owner{Instance: "bench", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, ns+":ttl-probe", probe, row.ttl)
	if err != nil {
		return fail("acquire a TTL probe", err)
	}
	row.granted = g.TTL
	_ = b.Release(ctx, ns+":ttl-probe", probe, g.Token)
	lk, err := leasehold.NewLocker(b, leasehold.WithNamespace(ns), leasehold.WithInstance("bench"), leasehold.WithTTL(row.ttl))
	if err != nil {
		return fail("locker", err)
	}
	// Acquire latency, uncontended.
	var lat []time.Duration
	for i := range samples * 60 {
		t0 := time.Now()
		l, err := lk.TryAcquire(ctx, fmt.Sprintf("lat%d", i))
		if err != nil {
			return fail("acquire", err)
		}
		lat = append(lat, time.Since(t0))
		_ = l.Release(ctx)
	}
	row.p50, row.p99 = matrixPct(lat, 50), matrixPct(lat, 99)
	// Throughput: 8 goroutines, distinct keys, 2 s.
	var cycles atomic.Int64
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; tctx.Err() == nil; i++ {
				l, err := lk.TryAcquire(tctx, fmt.Sprintf("tp%d-%d", g, i%16))
				if err != nil {
					continue
				}
				if l.Release(context.Background()) == nil {
					cycles.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	row.tput = float64(cycles.Load()) / 2
	// Burst: the seed's scenario (benchkit.Seed) at burstClients clients.
	blk, err := leasehold.NewLocker(b, leasehold.WithNamespace(ns), leasehold.WithInstance("burst"),
		leasehold.WithTTL(max(benchkit.SeedTTL, row.caps.MinTTL)))
	if err != nil {
		return fail("locker", err)
	}
	row.burst = benchkit.Seed(burstClients, benchkit.SeedTries, benchkit.SeedTry, "burst/", benchkit.LockerTry(blk))
	// Hand-over: a second client blocked in Acquire.
	b2, err := open.Open(ctx, srv.URL)
	if err != nil {
		return fail("open second client", err)
	}
	defer b2.Close()
	lk2, err := leasehold.NewLocker(b2, leasehold.WithNamespace(ns), leasehold.WithInstance("waiter"), leasehold.WithTTL(row.ttl))
	if err != nil {
		return fail("locker", err)
	}
	var hand []time.Duration
	for i := range samples * 4 {
		key := fmt.Sprintf("hand%d", i)
		l, err := lk.Acquire(ctx, key)
		if err != nil {
			return fail("hand-over acquire", err)
		}
		got := make(chan time.Time, 1)
		go func() {
			l2, err := lk2.Acquire(ctx, key)
			got <- time.Now()
			if err == nil {
				_ = l2.Release(ctx)
			}
		}()
		time.Sleep(100 * time.Millisecond) // the waiter is blocked by then; this measurement tolerates it not being
		t0 := time.Now()
		_ = l.Release(ctx)
		hand = append(hand, (<-got).Sub(t0))
	}
	row.handP50, row.handP99 = matrixPct(hand, 50), matrixPct(hand, 99)
	// RTO after kill -9 of the holder: a "leasehold lock" process.
	for i := range samples {
		d, err := rtoKill(ctx, product, srv.URL, ns, fmt.Sprintf("rto%d", i), row.ttl, lk2, dir)
		if err != nil {
			return fail("rto after kill -9", err)
		}
		row.rtoKill = append(row.rtoKill, d)
	}
	// RTO after a crash of the backend server.
	if srv.Restartable() {
		for i := range min(samples, 3) {
			if err := srv.Kill(); err != nil {
				return fail("kill server", err)
			}
			t0 := time.Now()
			if err := srv.Start(); err != nil {
				return fail("start server", err)
			}
			key := fmt.Sprintf("restart%d", i)
			for {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := lk.TryAcquire(actx, key)
				cancel()
				if err == nil {
					row.rtoRest = append(row.rtoRest, time.Since(t0))
					_ = l.Release(ctx)
					break
				}
				if ctx.Err() != nil || time.Since(t0) > time.Minute {
					return fail("acquire after restart", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	if noChaos {
		row.chaos = "not run"
		return row
	}
	lab, err := os.Executable()
	if err != nil {
		return fail("executable", err)
	}
	row.chaos = a.matrixChaos(ctx, lab, kind, filepath.Join(dir, "chaos"), chaosDur)
	return row
}

// rtoKill starts "leasehold lock" as the holder of key, kills it with
// SIGKILL once it holds the lock, and measures until waiter acquires it.
func rtoKill(ctx context.Context, exe, url, ns, key string, ttl time.Duration, waiter *leasehold.Locker, dir string) (time.Duration, error) {
	flag := filepath.Join(dir, key+".held")
	holder := exec.Command(exe, "--backend", url, "--namespace", ns, "--instance", "holder", "lock", "--ttl", ttl.String(), key,
		"--", "sh", "-c", "echo > "+flag+"; exec sleep 600")
	child, err := childproc.Start(holder, childproc.Options{Group: true})
	if err != nil {
		return 0, err
	}
	defer func() { _ = child.Kill(); _ = child.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(flag); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, errors.New("the holder did not acquire the lock within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	got := make(chan error, 1)
	var at time.Time
	go func() {
		l, err := waiter.Acquire(ctx, key)
		at = time.Now()
		if err == nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the waiter finds it held
	t0 := time.Now()
	if err := child.Kill(); err != nil {
		return 0, err
	}
	if err := <-got; err != nil {
		return 0, err
	}
	return at.Sub(t0), nil
}

func (a *app) matrixChaos(ctx context.Context, exe, kind, dir string, d time.Duration) string {
	cfg := harness.Config{Backend: kind, Instances: 5, Duration: d, Seed: 1, Out: dir,
		WorkerCommand: func(env []string) *exec.Cmd {
			c := exec.Command(exe, "chaos", "worker")
			c.Env = env
			return c
		}}
	if _, err := harness.Execute(ctx, cfg); err != nil {
		return "error: " + err.Error()
	}
	r, err := checker.Check(dir, checker.Options{})
	if err != nil {
		return "error: " + err.Error()
	}
	var unexplained int
	for _, dup := range r.FencedDuplicates {
		if !dup.Explained {
			unexplained++
		}
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	s := fmt.Sprintf("%s: %d faults; fenced dup %d, regressions %d, overlaps %d, stale writes rejected %d, linearizable %s",
		verdict, len(r.Run.Applied), unexplained, len(r.Regressions), len(r.Overlaps), r.FencedRejected, r.Linearizable)
	if len(r.Predicted) > 0 {
		s += "; predicted: " + strings.Join(r.Predicted, "; ")
	}
	if len(r.Failures) > 0 {
		s += "; failures: " + strings.Join(r.Failures, "; ")
	}
	if len(r.Warnings) > 0 {
		s += "; warnings: " + strings.Join(r.Warnings, "; ")
	}
	s += fmt.Sprintf("; occurrences missed %d of %d", len(r.Missed), r.Expected)
	return s
}

func matrixPct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func matrixMS(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func renderMatrix(rows []matrixRow, argv string) string {
	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, `# Backend matrix (measured)

Generated by `+"`%s`"+` on %s, %s/%s, %d CPUs, load average %s at the end.
Every figure comes from one run on one host: private servers started by internal/testkit/testserver on loopback,
so latencies are floors of the backends on this machine, not of a network. Compare ratios, not absolutes;
the machine is shared and noisy.

- **acquire P50/P99**: uncontended TryAcquire of a fresh key.
- **cycles/s**: acquire + release, 8 goroutines on distinct keys, 2 s.
- **burst 1,000**: the seed's scenario: 1,000 clients start at once, each takes its own key with up to 3 TryAcquires of at most 50 ms, 10 ms apart, on a 2 s lease (or the backend's minimum), then releases; the share that got their lock, and the P99 of the time to get it.
- **hand-over**: from the holder's Release call until a client blocked in Acquire returns.
- **RTO kill -9**: from SIGKILL of a `+"`leasehold lock`"+` holder until a client blocked in Acquire holds the key, at the TTL shown (the smallest the harness uses; the goal is at most the granted TTL + 0.5 s).
- **RTO restart**: from SIGKILL of the backend server (restarted at once on the same data) until an Acquire of a fresh key succeeds through an existing client.
- **chaos**: `+"`leasehold-lab chaos --backend KIND --instances 5 --seed 1`"+` with every fault; "fenced dup" counts occurrences that took effect twice at the fenced sink without a lost lease to explain it.

| backend | declared | TTL asked → granted | acquire P50 / P99 | cycles/s | burst 1,000 (success / P99) | hand-over P50 / P99 | RTO kill -9 (P50 / max) | RTO restart (P50 / max) |
|---|---|---|---|---|---|---|---|---|
`, argv, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.Fields(string(load) + " ?")[0])
	for _, r := range rows {
		if r.err != "" {
			fmt.Fprintf(&b, "| %s | — | — | error: %s | | | | | |\n", r.kind, strings.ReplaceAll(r.err, "|", "/"))
			continue
		}
		decl := fmt.Sprintf("SafeFencing=%v, DurableFencing=%v, ServerClock=%v", r.caps.SafeFencing, r.caps.DurableFencing, r.caps.ServerClock)
		rest := "n/a (no server)"
		if len(r.rtoRest) > 0 {
			rest = matrixMS(matrixPct(r.rtoRest, 50)) + " / " + matrixMS(slices.Max(r.rtoRest))
		}
		fmt.Fprintf(&b, "| %s | %s | %v → %v | %s / %s | %.0f | %.2f %% / %s | %s / %s | %s / %s | %s |\n", r.kind, decl, r.ttl, r.granted, matrixMS(r.p50), matrixMS(r.p99), r.tput,
			r.burst.SuccessPct(), matrixMS(r.burst.P99), matrixMS(r.handP50), matrixMS(r.handP99), matrixMS(matrixPct(r.rtoKill, 50)), matrixMS(slices.Max(r.rtoKill)), rest)
	}
	fmt.Fprintf(&b, "\n## Chaos result per backend\n\n| backend | result |\n|---|---|\n")
	for _, r := range rows {
		c := r.chaos
		if r.err != "" {
			c = "not run (" + r.err + ")"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", r.kind, strings.ReplaceAll(c, "|", "/"))
	}
	fmt.Fprintf(&b, "\nRedlock is not in this table: the matrix kills and restarts one server and the chaos run proxies one endpoint, and a Redlock quorum has N of each; it declares SafeFencing=false and keeps no run ledger.\n")
	return b.String()
}
