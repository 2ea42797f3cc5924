package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/schedule"
)

// buildJobs turns cfg's jobs into scheduler jobs, in config order; the
// error lists every job that cannot be built.
// hooks (nil: none) calls their on_failure hooks.
func buildJobs(cfg *Config, client *http.Client, scrub *redact.Scrubber, log *slog.Logger, sup commandStarter, hooks *hookRunner) ([]schedule.Job, error) {
	var (
		out  []schedule.Job
		errs []error
	)
	for i := range cfg.Jobs {
		j := &cfg.Jobs[i]
		fn := httpFunc(j, client, scrub, httpTimeout(j))
		if j.Command != nil {
			fn = commandFunc(j, cfg.Instance, log, sup)
		}
		fn = scrubErrors(fn, scrub) // run errors are stored, logged and served
		fn = hooks.wrap(j, cfg.hookFor(j), fn)
		sj, err := j.job(fn, time.Duration(cfg.Retention))
		if err != nil {
			errs = append(errs, cfg.errf(fmt.Sprintf("jobs[%d]", i), "%v", err))
			continue
		}
		if err := schedule.CheckKeyLengths(cfg.Namespace, sj.Name); err != nil {
			errs = append(errs, cfg.errf(fmt.Sprintf("jobs[%d]", i), "%v", err))
			continue
		}
		out = append(out, sj)
	}
	return out, errors.Join(errs...)
}

// fixedChanges lists the settings that differ between old and new and that
// a running daemon cannot apply: its backend, identity, scheduler settings,
// admin listener and logger are made once, by New.
func fixedChanges(old, new *Config) []error {
	var errs []error
	differ := func(field string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			errs = append(errs, fmt.Errorf("%s changed: a running daemon cannot apply it (restart to apply it)", field))
		}
	}
	quoted := func(field, a, b string) {
		if a != b {
			errs = append(errs, fmt.Errorf("%s %q → %q: a running daemon cannot apply it (restart to apply it)", field, a, b))
		}
	}
	quoted("backend", redactURL(old.Backend), redactURL(new.Backend))
	if old.Backend != new.Backend && redactURL(old.Backend) == redactURL(new.Backend) {
		errs = append(errs, errors.New("backend credentials changed: a running daemon cannot apply it (restart to apply it)"))
	}
	quoted("instance", old.Instance, new.Instance)
	quoted("namespace", old.Namespace, new.Namespace)
	quoted("grace", time.Duration(old.Grace).String(), time.Duration(new.Grace).String())
	quoted("retention", time.Duration(old.Retention).String(), time.Duration(new.Retention).String())
	quoted("http.listen", old.HTTP.Listen, new.HTTP.Listen)
	differ("http (tokens, TLS or open_reads)", old.HTTP, new.HTTP)
	differ("log", old.Log, new.Log)
	return errs
}

// Reload applies cfg's jobs to the running daemon: a job that is new is
// registered, one that is gone is removed, one whose settings changed is
// replaced (its old timer is stopped before the new one starts, so there
// are never two timers for one name; runs already started go on). Settings
// other than the jobs cannot change while the daemon runs: a cfg that
// changes them, or that has an invalid job, is refused whole with an error
// wrapping ErrConfigNotReloaded that lists every reason, and nothing changes.
// cfg should come from Load or Parse, which validate it.
func (d *Daemon) Reload(cfg *Config) error {
	if cfg == nil {
		return fmt.Errorf("%w: config is nil", ErrConfigNotReloaded)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	errs := fixedChanges(d.cfg, cfg)
	scrub := cfg.scrubber()
	jobs, err := buildJobs(cfg, d.client, scrub, d.log, d.supervisors, d.hooks)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// The new config's secrets (its ${NAME}s) are not the daemon's
		// scrubber's yet: mask them here, as the old ones.
		err := fmt.Errorf("%w: %s: %w", ErrConfigNotReloaded, cfg.path, errors.Join(errs...))
		return redact.Error(redact.Error(err, scrub), d.scrub)
	}
	d.scrub.Merge(scrub) // the new jobs' secrets are masked in the log before they run
	old := map[string]JobConfig{}
	for _, j := range d.cfg.Jobs {
		old[j.Name] = j
	}
	next := map[string]bool{}
	var added, changed, removed []string
	for i, sj := range jobs {
		next[sj.Name] = true
		prev, ok := old[sj.Name]
		switch {
		case !ok:
			added = append(added, sj.Name)
		case !reflect.DeepEqual(prev, cfg.Jobs[i]) || !reflect.DeepEqual(d.cfg.hookFor(&prev), cfg.hookFor(&cfg.Jobs[i])):
			changed = append(changed, sj.Name)
		default:
			continue
		}
		if d.holding {
			if err := d.sched.Replace(sj); err != nil {
				errs = append(errs, fmt.Errorf("job %q: %w", sj.Name, err))
			}
		}
	}
	for _, j := range d.cfg.Jobs {
		if next[j.Name] {
			continue
		}
		removed = append(removed, j.Name)
		if d.holding {
			if err := d.sched.Remove(j.Name); err != nil {
				errs = append(errs, fmt.Errorf("job %q: %w", j.Name, err))
			}
		}
	}
	d.cfg.Jobs, d.cfg.OnFailure, d.jobs = cfg.Jobs, cfg.OnFailure, jobs
	d.hooks.use(cfg)
	d.log.Info("config reloaded", "file", cfg.path, "added", added, "changed", changed, "removed", removed)
	if len(errs) > 0 {
		return fmt.Errorf("reloading %s: %w", cfg.path, errors.Join(errs...))
	}
	return nil
}

// suspendJobs stops every job's timer (runs already started go on): the
// daemon claims nothing while it does not hold its instance id.
func (d *Daemon) suspendJobs() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.holding {
		return
	}
	d.holding = false
	for _, j := range d.jobs {
		if err := d.sched.Remove(j.Name); err != nil {
			d.log.Error("stopping job", "job", j.Name, "err", err)
		}
	}
}

// resumeJobs starts the current config's jobs again.
func (d *Daemon) resumeJobs() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.holding {
		return
	}
	d.holding = true
	for _, j := range d.jobs {
		if err := d.sched.Replace(j); err != nil {
			d.log.Error("starting job", "job", j.Name, "err", err)
		}
	}
}
