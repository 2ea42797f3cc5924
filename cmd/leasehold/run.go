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

func newJobsCmd(a *app) *cobra.Command {
	var config string
	var n int
	cmd := &cobra.Command{
		Use:   "jobs --config leasehold.yaml",
		Short: "Show the jobs of a config file and their next occurrences",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.loadConfig(cmd, config)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			l, err := a.openURL(ctx, cfg.Backend)
			if err != nil {
				return err
			}
			b, err := ledgerOf(l)
			if err != nil {
				return err
			}
			defer b.Close()
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSCHEDULE\tZONE\tLAST CLAIMED\tNEXT (UTC)\tVERSION")
			now := time.Now()
			for _, j := range cfg.Jobs {
				spec, err := schedule.Parse(j.Schedule, j.Zone)
				if err != nil {
					return err
				}
				spec = spec.WithRevision(j.Revision)
				l := schedule.NamespaceLedger(b, cfg.Namespace)
				hw, _, err := l.HighWater(ctx, j.Name)
				if err != nil {
					return err
				}
				vs, err := schedule.ReadVersionState(ctx, l, j.Name, spec)
				if err != nil {
					return err
				}
				last := "-"
				if !hw.IsZero() {
					last = hw.Format(daemon.InstantFormat)
				}
				var next []string
				at := now
				for range n {
					at = spec.Next(at)
					next = append(next, at.Format(daemon.InstantFormat))
				}
				zone := j.Zone
				if zone == "" {
					zone = "UTC"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(j.Name), cell(j.Schedule), cell(zone), last, joinComma(next), versionCell(spec.Version(), vs, now))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "config `file` (YAML)")
	cmd.Flags().IntVar(&n, "next", 3, "how many next occurrences to show")
	return cmd
}

// versionCell says how the config's schedule version v stands in the
// ledger; a refused one is spelled out, since its daemons run nothing.
func versionCell(v string, vs schedule.VersionState, now time.Time) string {
	switch {
	case vs.Current == "":
		return v + " (not recorded yet)"
	case vs.Current == v && vs.From.After(now):
		return v + " (switches in at " + vs.From.Format(daemon.InstantFormat) + ")"
	case vs.Current == v:
		return v + " (current)"
	case vs.Superseded:
		return v + " REFUSED: superseded by " + vs.Current + "; daemons with this config claim nothing for the job (deploy the current config, or set a new revision to return to it)"
	}
	return v + " (new: switches in once a daemon runs it; current " + vs.Current + ")"
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
	var job, state string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs [--job NAME]",
		Short: "Show run history from the ledger, newest first",
		Args:  cobra.NoArgs,
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
			l, err := a.openBackend(ctx)
			if err != nil {
				return err
			}
			b, err := ledgerOf(l)
			if err != nil {
				return err
			}
			defer b.Close()
			runs, err := schedule.NamespaceLedger(b, a.namespace).ListRuns(ctx, backend.RunFilter{Job: job, State: backend.RunState(state), Limit: limit})
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
	cmd.Flags().StringVar(&job, "job", "", "only this job")
	cmd.Flags().StringVar(&state, "state", "", "only runs in this state (running, succeeded, failed, abandoned)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many runs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (tokens as strings)")
	return cmd
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
