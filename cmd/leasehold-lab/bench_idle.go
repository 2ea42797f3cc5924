package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// benchIdleFlags are the flags of "leasehold-lab bench idle".
type benchIdleFlags struct {
	jobs     string
	duration time.Duration
	settle   time.Duration
	schedule string
	exe      string
	http     bool
	keep     bool
}

func newBenchIdleCmd(a *app) *cobra.Command {
	f := benchIdleFlags{}
	cmd := &cobra.Command{
		Use:   "idle",
		Short: "Measure what a daemon with many scheduled jobs costs while nothing is due",
		Long: `Measure the idle cost of "leasehold run": for each --jobs count, start a
daemon (the leasehold binary, see --leasehold, or --exe) as a child process on a fresh SQLite file in
a temporary directory, with that many command jobs on --schedule (by
default daily at 03:00 UTC, so that none comes due), wait until its
start-up work is done (it has logged every job's schedule version) and
--settle more, then measure over --duration:

  cpu       utime + stime of the child (/proc/PID/stat) over the window,
            as a percentage of one core
  rss       VmRSS at the end of the window, and VmHWM (the peak, which
            start-up sets) (/proc/PID/status)
  threads   the child's OS threads at the end of the window

The machine's load average is printed
with each row: other processes change these figures, so compare rows of
one run. Linux only (it reads /proc).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			counts, err := parseCounts(f.jobs)
			if err != nil {
				return usageErrorf("--jobs %q: %v", f.jobs, err)
			}
			switch {
			case f.duration < time.Second:
				return usageErrorf("--duration %s: must be at least 1s", f.duration)
			case f.settle < 0:
				return usageErrorf("--settle %s: must not be negative", f.settle)
			case strings.TrimSpace(f.schedule) == "":
				return usageErrorf("--schedule %q: must not be empty", f.schedule)
			}
			if _, err := os.Stat("/proc/self/stat"); err != nil {
				return &exitError{code: ExitUsage, err: fmt.Errorf("bench idle reads /proc, which this system does not have: %w", err)}
			}
			exe := f.exe
			if exe == "" {
				bin, err := os.MkdirTemp("", "leasehold-lab-bin-")
				if err != nil {
					return &exitError{code: ExitInternal, err: err}
				}
				defer os.RemoveAll(bin)
				if exe, err = a.productBinary(cmd.Context(), bin); err != nil {
					return err // a usage error for a bad --leasehold, else internal
				}
			}
			return benchIdle(cmd.Context(), cmd.OutOrStdout(), exe, counts, f)
		},
	}
	cmd.Flags().StringVar(&f.jobs, "jobs", "100,1000,10000", "comma-separated job `counts`, one daemon each")
	cmd.Flags().DurationVar(&f.duration, "duration", 60*time.Second, "measurement `window` per count")
	cmd.Flags().DurationVar(&f.settle, "settle", 5*time.Second, "`time` to wait after start-up before measuring")
	cmd.Flags().StringVar(&f.schedule, "schedule", "0 3 * * *", "every job's `schedule`")
	cmd.Flags().StringVar(&f.exe, "exe", "", "leasehold `binary` to run as the daemon (default: --leasehold's), to compare builds")
	cmd.Flags().BoolVar(&f.http, "http", true, "serve the admin API (on a free loopback port), as a default daemon does")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the temporary directories (config, database, daemon log)")
	return cmd
}

// parseCounts parses "100,1000,10000".
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 100000 {
			return nil, fmt.Errorf("%q is not a count in 1..100000", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// idleResult is one count's measurement.
type idleResult struct {
	jobs      int
	startup   time.Duration // from exec to every version recorded
	cpu       float64       // % of one core over the window
	rssKB     int64
	hwmKB     int64
	threads   int64
	loadStart string
	loadEnd   string
}

func benchIdle(ctx context.Context, w io.Writer, exe string, counts []int, f benchIdleFlags) error {
	fmt.Fprintf(w, "daemon: %s; jobs on %q; window %v; admin API %v\n\n", exe, f.schedule, f.duration, f.http)
	var results []idleResult
	for _, n := range counts {
		r, err := idleOnce(ctx, exe, n, f)
		if err != nil {
			return &exitError{code: ExitInternal, err: fmt.Errorf("%d jobs: %w", n, err)}
		}
		results = append(results, r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "jobs\tstart-up\tCPU (% of a core)\tRSS\tpeak RSS\tthreads\tload avg (start → end)")
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%.1f s\t%.3f %%\t%.1f MB\t%.1f MB\t%d\t%s → %s\n", r.jobs, r.startup.Seconds(), r.cpu,
			float64(r.rssKB)/1024, float64(r.hwmKB)/1024, r.threads, r.loadStart, r.loadEnd)
	}
	return tw.Flush()
}

// idleOnce runs one daemon with n jobs and measures it.
func idleOnce(ctx context.Context, exe string, n int, f benchIdleFlags) (res idleResult, err error) {
	res.jobs = n
	dir, err := os.MkdirTemp("", "leasehold-bench-idle-")
	if err != nil {
		return res, err
	}
	if !f.keep {
		defer os.RemoveAll(dir)
	}
	listen := "off"
	if f.http {
		if listen, err = freeLoopback(); err != nil {
			return res, err
		}
	}
	var cfg bytes.Buffer
	fmt.Fprintf(&cfg, "backend: sqlite://%s\ninstance: bench-idle\nlog:\n  level: info\nhttp:\n  listen: %q\njobs:\n", filepath.Join(dir, "leasehold.db"), listen)
	for i := range n {
		fmt.Fprintf(&cfg, "  - name: job-%d\n    schedule: %q\n    command:\n      argv: [\"true\"]\n", i, f.schedule)
	}
	cfgPath := filepath.Join(dir, "leasehold.yaml")
	if err := os.WriteFile(cfgPath, cfg.Bytes(), 0o600); err != nil {
		return res, err
	}
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		return res, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "run", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	early := func(e error) error {
		tail, _ := os.ReadFile(logf.Name())
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("the daemon exited before the measurement ended (%v); its log ends:\n%s", e, tail)
	}
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-exited:
			exited <- e
			return early(e)
		case <-time.After(d):
			return nil
		}
	}
	// Start-up is done when the daemon has recorded every job's schedule
	// version (it logs each, at level info); then it gets the settle time.
	for deadline := time.Now().Add(10 * time.Minute); ; {
		data, err := os.ReadFile(logf.Name())
		if err != nil {
			return res, err
		}
		if bytes.Count(data, []byte("schedule version recorded")) >= n {
			break
		}
		if time.Now().After(deadline) {
			return res, errors.New("the daemon did not record every job's schedule version within 10 minutes")
		}
		if err := wait(100 * time.Millisecond); err != nil {
			return res, err
		}
	}
	res.startup = time.Since(start)
	if err := wait(f.settle); err != nil {
		return res, err
	}
	res.loadStart = loadAvg()
	t0, err := cpuTicks(pid)
	if err != nil {
		return res, err
	}
	w0 := time.Now()
	if err := wait(f.duration); err != nil {
		return res, err
	}
	t1, err := cpuTicks(pid)
	if err != nil {
		return res, err
	}
	window := time.Since(w0)
	res.cpu = float64(t1-t0) / userHZ / window.Seconds() * 100
	res.loadEnd = loadAvg()
	st, err := procStatus(pid)
	if err != nil {
		return res, err
	}
	res.rssKB, res.hwmKB, res.threads = st["VmRSS"], st["VmHWM"], st["Threads"]
	return res, nil
}

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, 100 on Linux.
const userHZ = 100

// cpuTicks returns utime + stime of pid, in USER_HZ ticks.
func cpuTicks(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return ut + st, nil
}

// procStatus returns the numeric fields of /proc/PID/status (kB for sizes).
func procStatus(pid int) (map[string]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if f := strings.Fields(v); len(f) > 0 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	return out, nil
}

// loadAvg returns the 1-minute load average, or "?".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// freeLoopback returns a loopback address with a port free now.
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
