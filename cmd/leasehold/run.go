package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/schedule"
)

// loadConfig loads --config and applies --backend / --instance /
// --namespace when they were given on the command line.
func (a *app) loadConfig(cmd *cobra.Command, path string) (*daemon.Config, error) {
	if path == "" {
		return nil, usageErrorf("--config is required")
	}
	cfg, err := daemon.Load(path)
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: err}
	}
	flags := cmd.Flags()
	if flags.Changed("backend") {
		cfg.Backend = a.backendURL
	}
	if flags.Changed("instance") {
		cfg.Instance = a.instance
	}
	if flags.Changed("namespace") {
		cfg.Namespace = a.namespace
	}
	return cfg, nil
}

func (a *app) openURL(ctx context.Context, raw string) (backend.Leases, error) {
	a.noteSecrets(raw)
	b, err := open.Open(ctx, raw)
	switch {
	case errors.Is(err, backend.ErrInvalid):
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("backend: %w", err)}
	case err != nil:
		return nil, &exitError{code: ExitInternal, err: err}
	}
	return b, nil
}

func newRunCmd(a *app) *cobra.Command {
	var config, httpAddr, logFormat, logLevel string
	cmd := &cobra.Command{
		Use:   "run --config leasehold.yaml",
		Short: "Run the jobs of a config file, each occurrence once across all daemons",
		Long: `Run the scheduler daemon: every daemon that shares the backend computes the
same occurrences of each job, and each occurrence is claimed by exactly one of
them. Execution is at-least-once under crash: retry (a job whose runner died is
run again elsewhere with a greater token) and at-most-once under crash: skip.
A job's effects are exactly-once only if it fences them with LEASEHOLD_TOKEN
or de-duplicates them by LEASEHOLD_JOB + LEASEHOLD_SCHEDULED_AT.

SIGTERM or SIGINT stops claiming, lets running jobs finish within the grace
period, then stops them. SIGHUP reloads the config file: jobs added, removed
or changed take effect at once (a changed job's old timer stops before its
new one starts); a config with an error, or one that changes anything but the
jobs (backend, instance, namespace, grace, retention, http, log: restart to
apply those), is refused with every reason logged, and the running config
goes on.

Only one daemon holds an instance id at a time. A second daemon with the same
instance id on the same backend logs who holds it and waits until it is
released or its lease expires; a restart after a kill -9 on the same host
(same boot, the old pid gone) takes the id over at once. A daemon paused past
its instance lease's TTL stops claiming, takes the id again and resumes.

The admin API (--http) needs a bearer token. With no admin token configured,
the first daemon generates one into a file of mode 0600 next to the SQLite
database (<database>.admin-token; else leasehold.admin-token next to the
config), prints it once if standard output is a terminal, and reads it from
there later; "leasehold status" finds it from --config or the backend.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The config file with the command line's overrides: at start,
			// and again on SIGHUP.
			load := func() (*daemon.Config, error) {
				cfg, err := a.loadConfig(cmd, config)
				if err != nil {
					return nil, err
				}
				if cmd.Flags().Changed("http") {
					cfg.SetListen(httpAddr)
				}
				if cmd.Flags().Changed("log-format") {
					cfg.Log.Format = logFormat
				}
				if cmd.Flags().Changed("log-level") {
					cfg.Log.Level = logLevel
				}
				return cfg, nil
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP) // from here on SIGHUP reloads instead of killing
			defer signal.Stop(hup)
			cfg, err := load()
			if err != nil {
				return err
			}
			log, err := daemon.NewLogger(a.stderr, cfg.Log.Format, cfg.Log.Level)
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			b, err := a.openURL(ctx, cfg.Backend)
			if err != nil {
				return err
			}
			defer b.Close()
			d, err := daemon.New(cfg, b, log)
			if err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			announceToken(a, d)
			go reloadOnHUP(ctx, hup, d, log, load)
			return d.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "config `file` (YAML)")
	cmd.Flags().StringVar(&httpAddr, "http", admin.DefaultAddress, "admin API and dashboard `address` (host:port, or off); overrides http.listen")
	cmd.Flags().StringVar(&logFormat, "log-format", "text", "log `format`: text or json; overrides log.format")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log `level`: debug, info, warn or error; overrides log.level")
	return cmd
}

// reloadOnHUP reloads the daemon's config on every signal from hup until
// ctx ends. A config that cannot be loaded or applied is logged with every
// reason, and the running config goes on.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, d *daemon.Daemon, log *slog.Logger, load func() (*daemon.Config, error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		cfg, err := load()
		if err == nil {
			err = d.Reload(cfg)
		} else {
			err = fmt.Errorf("%w: %w", daemon.ErrNotReloaded, err)
		}
		if err != nil {
			log.Error("SIGHUP: config not applied; the running config goes on", "err", err)
		}
	}
}

// announceToken prints an admin token the daemon has just generated, once,
// and only to a terminal: the log (stderr) never holds it, nor does
// standard output captured by a service manager. The file keeps it.
func announceToken(a *app, d *daemon.Daemon) {
	path, secret, created := d.AdminToken()
	f, ok := a.stdout.(*os.File)
	if !created || !ok || !isatty.IsTerminal(f.Fd()) {
		return
	}
	fmt.Fprintf(a.stdout, "leasehold: generated the admin API token (shown this once; kept in %s, mode 0600):\n\n    %s\n\n"+
		"leasehold: \"leasehold status\" reads it from there; the dashboard asks for it.\n", path, secret)
}

// jobInfo is one element of "leasehold jobs --json". Every field is always
// present; instants are RFC 3339 in UTC with milliseconds, "" for none.
type jobInfo struct {
	Name     string   `json:"name"`
	Schedule string   `json:"schedule"`
	Zone     string   `json:"zone"`
	Mode     string   `json:"mode"`
	Paused   bool     `json:"paused_at_start"` // the config's paused: true (the live state: leasehold status)
	Last     string   `json:"last_claimed"`
	Next     []string `json:"next"`
	Version  string   `json:"version"`
	// VersionState is how the config's schedule version stands in the
	// ledger: "unrecorded", "pending" (switches in at SwitchesAt), "current",
	// "new" (switches in once a daemon runs it) or "refused" (superseded by
	// CurrentVersion: daemons with this config claim nothing for the job).
	VersionState   string `json:"version_state"`
	CurrentVersion string `json:"current_version"`
	SwitchesAt     string `json:"switches_at"`
}

func newJobsCmd(a *app) *cobra.Command {
	var config string
	var n int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jobs --config leasehold.yaml",
		Short: "Show the jobs of a config file and their next occurrences",
		Long: `Show the jobs of a config file: schedule, zone, the last occurrence claimed
(from the config's backend and namespace; --backend and --namespace
override them) and the next occurrences. Like every read command it
creates nothing: before a daemon has made a SQLite ledger it shows the jobs
with nothing claimed.

With --json, print a JSON array of objects with the fields name, schedule,
zone, mode, paused_at_start, last_claimed, next (an array), version,
version_state (unrecorded, pending, current, new or refused),
current_version and switches_at; every field is always present, instants
are RFC 3339 UTC with milliseconds and "" stands for none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 0 || n > 100 {
				return usageErrorf("--next %d: must be in 0..100", n)
			}
			cfg, err := a.loadConfig(cmd, config)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			// A SQLite ledger nobody has made yet (the daemon has not run):
			// the jobs and their next occurrences, nothing claimed, and no
			// file made — jobs is a read command.
			var b backend.Backend
			if path, missing := missingSQLite(cfg.Backend); missing {
				fmt.Fprintf(a.stderr, "leasehold: no SQLite database at %s yet: nothing claimed (a daemon creates it)\n", cell(path))
			} else if err := a.mustExist(cfg.Backend); err != nil {
				return err
			} else {
				l, err := a.openURL(ctx, cfg.Backend)
				if err != nil {
					return err
				}
				if b, err = ledgerOf(l); err != nil {
					return err
				}
				defer b.Close()
			}
			now := time.Now()
			rows := make([]jobInfo, 0, len(cfg.Jobs))
			for _, j := range cfg.Jobs {
				spec, err := schedule.Parse(j.Schedule, j.Zone)
				if err != nil {
					return err
				}
				spec = spec.WithRevision(j.Revision)
				var hw time.Time
				var vs schedule.VersionState
				if b != nil {
					l := schedule.NamespaceLedger(b, cfg.Namespace)
					if hw, _, err = l.HighWater(ctx, j.Name); err != nil {
						return err
					}
					if vs, err = schedule.ReadVersionState(ctx, l, j.Name, spec); err != nil {
						return err
					}
				}
				row := jobInfo{Name: j.Name, Schedule: j.Schedule, Zone: j.Zone, Mode: j.Mode, Paused: j.Paused, Next: []string{}, Version: spec.Version()}
				if row.Zone == "" {
					row.Zone = "UTC"
				}
				if row.Mode == "" {
					row.Mode = string(schedule.Once)
				}
				if !hw.IsZero() {
					row.Last = hw.Format(daemon.InstantFormat)
				}
				at := now
				for range n {
					at = spec.Next(at)
					row.Next = append(row.Next, at.Format(daemon.InstantFormat))
				}
				row.VersionState, row.CurrentVersion = versionState(spec.Version(), vs, now), vs.Current
				if vs.Current == spec.Version() && vs.From.After(now) {
					row.SwitchesAt = vs.From.Format(daemon.InstantFormat)
				}
				rows = append(rows, row)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSCHEDULE\tZONE\tLAST CLAIMED\tNEXT (UTC)\tVERSION")
			for _, r := range rows {
				last := r.Last
				if last == "" {
					last = "-"
				}
				name := cell(r.Name)
				if r.Paused {
					name += " (paused at start)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, cell(r.Schedule), cell(r.Zone), last, joinComma(r.Next), versionCell(r))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "config `file` (YAML)")
	cmd.Flags().IntVar(&n, "next", 3, "how many next occurrences to show")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// versionState names how the config's schedule version v stands in the
// ledger (see jobInfo.VersionState).
func versionState(v string, vs schedule.VersionState, now time.Time) string {
	switch {
	case vs.Current == "":
		return "unrecorded"
	case vs.Current == v && vs.From.After(now):
		return "pending"
	case vs.Current == v:
		return "current"
	case vs.Superseded:
		return "refused"
	}
	return "new"
}

// versionCell says how a job's schedule version stands in the ledger; a
// refused one is spelled out, since its daemons run nothing.
func versionCell(r jobInfo) string {
	// The versions come from the ledger, which stores them unchecked.
	v, current := cell(r.Version), cell(r.CurrentVersion)
	switch r.VersionState {
	case "unrecorded":
		return v + " (not recorded yet)"
	case "pending":
		return v + " (switches in at " + cell(r.SwitchesAt) + ")"
	case "current":
		return v + " (current)"
	case "refused":
		return v + " REFUSED: superseded by " + current + "; daemons with this config claim nothing for the job (deploy the current config, or set a new revision to return to it)"
	}
	return v + " (new: switches in once a daemon runs it; current " + current + ")"
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// runInfo is one row of "leasehold runs".
type runInfo struct {
	Job         string          `json:"job"`
	ScheduledAt string          `json:"scheduled_at"`
	State       string          `json:"state"`
	Instance    string          `json:"instance"`
	Token       leasehold.Token `json:"token"`
	Attempt     int             `json:"attempt"`
	DurationMS  int64           `json:"duration_ms"`
	Error       string          `json:"error,omitempty"`
	Result      string          `json:"result,omitempty"`
	Trigger     string          `json:"trigger,omitempty"` // the key of a triggered run ("run now")
}

func newRunsCmd(a *app) *cobra.Command {
	var job, state, config string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs [--config leasehold.yaml] [--job NAME]",
		Short: "Show run history from the ledger, newest first",
		Long: `Show the run history of the namespace's jobs from the ledger, newest first.

` + targetHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10000 {
				return usageErrorf("--limit %d: must be in 1..10000", limit)
			}
			switch backend.RunState(state) {
			case "", backend.Running, backend.Succeeded, backend.Failed, backend.Abandoned:
			default:
				return usageErrorf("--state %q: must be running, succeeded, failed or abandoned", state)
			}
			if job != "" {
				// Names with '!' hold scheduler metadata (versions, pause
				// state, trigger keys), not runs; no job is named so.
				if err := leasehold.ValidatePath("job", job); err != nil {
					return usageErrorf("--job %q: not a job name: %v", job, err)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			l, ns, err := a.openTarget(ctx, cmd, config)
			if err != nil {
				return err
			}
			b, err := ledgerOf(l)
			if err != nil {
				return err
			}
			defer b.Close()
			runs, err := listRuns(ctx, schedule.NamespaceLedger(b, ns), backend.RunFilter{Job: job, State: backend.RunState(state), Limit: limit})
			if err != nil {
				return err
			}
			rows := make([]runInfo, 0, len(runs))
			for _, r := range runs {
				st := string(r.State)
				if r.State == backend.Running && r.Expired {
					st = "running (runner's lease expired)"
				}
				key, _ := schedule.IsTriggered(r)
				rows = append(rows, runInfo{Job: r.Job, ScheduledAt: r.ScheduledAt.Format(daemon.InstantFormat), State: st, Trigger: key,
					Instance: r.Owner.Instance, Token: leasehold.Token(r.Token), Attempt: r.Attempt,
					DurationMS: r.Duration.Milliseconds(), Error: a.scrub.Text(r.Error), Result: a.scrub.Text(r.Result)})
			}
			sort.SliceStable(rows, func(i, j int) bool { return rows[i].ScheduledAt > rows[j].ScheduledAt })
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULED (UTC)\tJOB\tSTATE\tINSTANCE\tTOKEN\tATTEMPT\tTOOK\tERROR")
			for _, r := range rows {
				job := cell(r.Job)
				if r.Trigger != "" {
					job += " (run now: " + cell(r.Trigger) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%v\t%s\n", r.ScheduledAt, job, cell(r.State), cell(r.Instance), r.Token, r.Attempt,
					time.Duration(r.DurationMS)*time.Millisecond, oneLine(r.Error, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&config, "config", "", configFlagHelp)
	cmd.Flags().StringVar(&job, "job", "", "only this job")
	cmd.Flags().StringVar(&state, "state", "", "only runs in this state (running, succeeded, failed, abandoned)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (tokens as strings)")
	return cmd
}

// listRuns lists runs as f asks; without f.Job it leaves out the
// scheduler's own records (schedule versions, pause states, trigger keys:
// job names with a '!', which no job has) and reads on, page after page, so
// that up to f.Limit runs are shown.
func listRuns(ctx context.Context, l backend.Ledger, f backend.RunFilter) ([]backend.Run, error) {
	if f.Job != "" {
		return l.ListRuns(ctx, f)
	}
	var out []backend.Run
	seen := map[string]bool{}
	for page := 0; page < 100 && len(out) < f.Limit; page++ {
		rs, err := l.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			id := r.Job + "@" + r.ScheduledAt.String()
			if seen[id] || strings.ContainsRune(r.Job, '!') || len(out) == f.Limit {
				continue
			}
			seen[id] = true
			out = append(out, r)
		}
		if len(rs) < f.Limit {
			break // the ledger has no more
		}
		// The next page: runs before the last instant listed, and those at
		// it that the limit cut off (seen keeps them from repeating).
		next := rs[len(rs)-1].ScheduledAt.Add(time.Millisecond)
		if !f.Before.IsZero() && !next.Before(f.Before) {
			next = rs[len(rs)-1].ScheduledAt
		}
		f.Before = next
	}
	return out, nil
}

// oneLine returns the first line of s, at most n runes of it, escaped
// for a terminal (see cell).
func oneLine(s string, n int) string {
	runes := 0
	for i, r := range s {
		if r == '\n' || runes >= n {
			return cell(s[:i]) + "…"
		}
		runes++
	}
	return cell(s)
}
