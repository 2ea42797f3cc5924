package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/internal/childproc"
)

const demoConfig = `# written by leasehold demo
backend: sqlite://%[1]s
grace: 5s
jobs:
  - name: tick
    schedule: "@every 1s"
    lease_ttl: 3s
    command: {argv: [%[2]q, demo-job, %[3]q]}
  - name: report
    schedule: "@every 4s"
    lease_ttl: 2s
    crash: retry
    command: {argv: [%[2]q, demo-job, --took, 2s, %[3]q]}
`

func newDemoCmd(a *app) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run 3 daemons on one SQLite file, kill one mid-job, and show each occurrence ran once",
		Long: `Start 3 "leasehold run" daemons as separate processes on one SQLite file,
with a job every second and a 2-second job every 4 seconds. When the slow job
is running on one of them, kill that daemon with SIGKILL. Then stop the others
and print, from the lines the jobs themselves wrote, which instance ran each
occurrence with which fencing token — and what became of the occurrence that
was running when its daemon died (crash policy retry: another daemon runs it
again with a greater token). Nothing to install; it takes about 20 seconds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.demo(cmd.Context(), dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the database, config and logs (default: a new temp dir)")
	return cmd
}

// demoLine is one line a demo job wrote.
type demoLine struct {
	event, job, at, instance string
	token, attempt           int
	pid                      int
}

func (a *app) demo(ctx context.Context, dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "leasehold-demo-")
		if err != nil {
			return err
		}
		dir = d
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	db, effects, conf := filepath.Join(dir, "leasehold.db"), filepath.Join(dir, "effects.log"), filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, demoConfig, db, exe, effects), 0o644); err != nil {
		return err
	}
	out := a.stdout
	fmt.Fprintf(out, "leasehold demo: 3 daemons (separate processes) share one SQLite file, %s\n", db)
	fmt.Fprintf(out, "  job tick:   every 1s, writes a line\n  job report: every 4s, takes 2s, crash policy retry\n\n")
	start := time.Now()
	since := func() string { return fmt.Sprintf("t+%4.1fs", time.Since(start).Seconds()) }

	procs := map[string]*childproc.Child{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("demo-%d", i)
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		defer logf.Close()
		// No admin API: the demo uses none, and must not take the
		// default address (nor stop because another process has it).
		cmd := exec.Command(exe, "run", "--config", conf, "--instance", name, "--http", "off")
		cmd.Stdout, cmd.Stderr = logf, logf
		// On Linux the kernel kills the daemons if the demo dies.
		c, err := childproc.Start(cmd, childproc.Options{DieWithParent: true})
		if err != nil {
			return err
		}
		procs[name] = c
		defer func() { _ = c.Kill(); _ = c.Wait() }()
		fmt.Fprintf(out, "%s  started %s (pid %d)\n", since(), name, c.Pid())
	}

	// Wait for the slow job to be running somewhere, then kill that daemon.
	var victim demoLine
	if !waitUntil(ctx, 30*time.Second, func() bool {
		for _, l := range readDemo(effects) {
			if l.job == "report" && l.event == "start" && !ended(effects, l) {
				victim = l
				return true
			}
		}
		return false
	}) {
		return fmt.Errorf("demo: the slow job never started; see the logs in %s", dir)
	}
	vp := procs[victim.instance]
	_ = vp.Kill()
	_ = vp.Wait()
	fmt.Fprintf(out, "%s  killed %s with SIGKILL while it ran report @ %s (token %d, attempt %d)\n",
		since(), victim.instance, victim.at, victim.token, victim.attempt)

	// Crash policy retry: another daemon reclaims it once its lease expires.
	retried := waitUntil(ctx, 30*time.Second, func() bool {
		for _, l := range readDemo(effects) {
			if l.job == "report" && l.at == victim.at && l.event == "end" {
				return true
			}
		}
		return false
	})
	time.Sleep(3 * time.Second) // let a few more occurrences run on the survivors
	for name, c := range procs {
		if name != victim.instance {
			_ = c.Terminate()
		}
	}
	for name, c := range procs {
		if name != victim.instance {
			_ = c.Wait()
		}
	}
	fmt.Fprintf(out, "%s  stopped the other daemons with SIGTERM (graceful)\n\n", since())

	ok := a.demoReport(ctx, db, effects, victim, retried)
	fmt.Fprintf(out, "\nfiles: %s (config, database, effects.log, one log per daemon)\n", dir)
	if !ok {
		return &exitError{code: 1, err: fmt.Errorf("demo: the check failed (see above)")}
	}
	return nil
}

// demoReport prints what the jobs wrote, per occurrence, checks it, and
// compares it with the ledger.
func (a *app) demoReport(ctx context.Context, db, effects string, victim demoLine, retried bool) bool {
	out := a.stdout
	lines := readDemo(effects)
	type occ struct {
		job, at string
		runs    []demoLine // start lines
		ends    []demoLine
	}
	byKey := map[string]*occ{}
	var keys []string
	for _, l := range lines {
		k := l.at + " " + l.job
		o := byKey[k]
		if o == nil {
			o = &occ{job: l.job, at: l.at}
			byKey[k] = o
			keys = append(keys, k)
		}
		if l.event == "start" {
			o.runs = append(o.runs, l)
		} else {
			o.ends = append(o.ends, l)
		}
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULED (UTC)\tJOB\tRAN ON (token, attempt) — from the lines the jobs wrote")
	good := true
	completed := map[string][]string{} // job -> instants completed (once, or re-run after the kill)
	var rerun []string
	for _, k := range keys {
		o := byKey[k]
		var parts []string
		for i, r := range o.runs {
			p := fmt.Sprintf("%s (token %d, attempt %d)", r.instance, r.token, r.attempt)
			if i == 0 && r.attempt > 1 {
				p = "a daemon killed before the job started -> " + p
			}
			if !ended(effects, r) {
				p += " KILLED mid-run"
			}
			parts = append(parts, p)
		}
		if rerunAfterKill(o.ends, victim) {
			// The killed daemon finished the job but died before it could
			// record the finish: retry ran it again (at-least-once).
			parts = append(parts, "(ran twice: its runner was killed before recording the finish)")
			rerun = append(rerun, o.job+" @ "+o.at)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", o.at, o.job, strings.Join(parts, " -> "))
		switch {
		case len(o.ends) == 0:
			continue
		case len(o.ends) > 1 && !rerunAfterKill(o.ends, victim):
			good = false
			continue
		}
		completed[o.job] = append(completed[o.job], o.at)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	for _, r := range rerun {
		fmt.Fprintf(out, "re-run:  %s completed on %s, which was then killed before it recorded the finish; retry ran it\n"+
			"         again with a greater token (at-least-once: only a sink idempotent per occurrence keeps such an effect single)\n", r, victim.instance)
	}

	// Every occurrence between the first and the last completed one ran.
	for _, job := range []string{"tick", "report"} {
		ats := completed[job]
		period := map[string]time.Duration{"tick": time.Second, "report": 4 * time.Second}[job]
		missed := 0
		for i := 1; i < len(ats); i++ {
			a0, _ := time.Parse(daemon.InstantFormat, ats[i-1])
			a1, _ := time.Parse(daemon.InstantFormat, ats[i])
			missed += int(a1.Sub(a0)/period) - 1
		}
		if missed > 0 || len(ats) == 0 {
			good = false
		}
		once := "each exactly once"
		for _, r := range rerun {
			if strings.HasPrefix(r, job+" @ ") {
				once = "each once except the re-run below"
			}
		}
		fmt.Fprintf(out, "%-7s %d occurrences completed, %s; %d missed between the first and the last\n", job+":", len(ats), once, missed)
	}
	var redo *demoLine
	for _, l := range lines {
		if l.job == "report" && l.at == victim.at && l.event == "end" {
			redo = &l
		}
	}
	if retried && redo != nil && redo.token > victim.token && redo.attempt == victim.attempt+1 {
		fmt.Fprintf(out, "killed:  report @ %s was running on %s (token %d) when it died; %s ran it again with token %d, attempt %d\n",
			victim.at, victim.instance, victim.token, redo.instance, redo.token, redo.attempt)
	} else {
		good = false
		fmt.Fprintf(out, "killed:  report @ %s on %s was NOT run again as crash policy retry says\n", victim.at, victim.instance)
	}

	// The ledger must agree with what the jobs wrote.
	var b backend.Backend
	l, err := a.openURL(ctx, "sqlite://"+db)
	if err == nil {
		b, err = ledgerOf(l)
	}
	if err != nil {
		fmt.Fprintf(out, "ledger:  cannot open: %v\n", err)
		return false
	}
	defer b.Close()
	disagree := 0
	for job, ats := range completed {
		for _, at := range ats {
			t, _ := time.Parse(daemon.InstantFormat, at)
			r, err := b.GetRun(ctx, job, t)
			o := byKey[at+" "+job]
			if err != nil || r.State != backend.Succeeded || int(r.Token) != o.ends[len(o.ends)-1].token {
				disagree++
			}
		}
	}
	if disagree > 0 {
		good = false
	}
	fmt.Fprintf(out, "ledger:  %d of the completed occurrences disagree with what the jobs wrote\n", disagree)
	switch {
	case good && len(rerun) > 0:
		fmt.Fprintln(out, "\nOK: each occurrence was claimed once and none was missed; the ones whose runner was killed were\nreclaimed and run again with a greater fencing token (crash policy retry: at-least-once), including\nthe re-run above whose first run had completed.")
	case good:
		fmt.Fprintln(out, "\nOK: each occurrence completed exactly once, none was missed, and the one whose runner was killed\nmid-run was reclaimed and run again with a greater fencing token (crash policy retry: at-least-once).")
	}
	return good
}

// rerunAfterKill reports whether ends (the end lines of one occurrence) are
// a run of the killed daemon that completed but was not recorded, then one
// retry with the next attempt and a greater token.
func rerunAfterKill(ends []demoLine, victim demoLine) bool {
	return len(ends) == 2 && ends[0].instance == victim.instance && ends[1].instance != victim.instance &&
		ends[1].attempt == ends[0].attempt+1 && ends[1].token > ends[0].token
}

// readDemo parses the effects file.
func readDemo(path string) []demoLine {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []demoLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			continue
		}
		l := demoLine{event: fs[0], job: fs[1], at: fs[2], instance: fs[3]}
		l.token, _ = strconv.Atoi(fs[4])
		l.attempt, _ = strconv.Atoi(fs[5])
		l.pid, _ = strconv.Atoi(fs[6])
		out = append(out, l)
	}
	return out
}

// ended reports whether run l wrote its end line.
func ended(path string, l demoLine) bool {
	for _, e := range readDemo(path) {
		if e.event == "end" && e.job == l.job && e.at == l.at && e.token == l.token {
			return true
		}
	}
	return false
}

func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

func newDemoJobCmd(a *app) *cobra.Command {
	var took time.Duration
	cmd := &cobra.Command{
		Use:    "demo-job [--took D] FILE",
		Short:  "The job the demo runs: records its occurrence in FILE",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.OpenFile(args[0], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			line := func(event string) error {
				_, err := fmt.Fprintf(f, "%s %s %s %s %s %s %d\n", event, os.Getenv("LEASEHOLD_JOB"), os.Getenv("LEASEHOLD_SCHEDULED_AT"),
					os.Getenv("LEASEHOLD_INSTANCE"), os.Getenv("LEASEHOLD_TOKEN"), os.Getenv("LEASEHOLD_ATTEMPT"), os.Getpid())
				return err
			}
			if err := line("start"); err != nil {
				return err
			}
			time.Sleep(took) // the job's work
			return line("end")
		},
	}
	cmd.Flags().DurationVar(&took, "took", 0, "how long the job works")
	return cmd
}
