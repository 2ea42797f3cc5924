// Package daemon is the long-running `leasehold run` process: it loads a
// YAML config of jobs (commands run without a shell, HTTP calls) and runs
// each occurrence once across every daemon sharing the backend, through
// package schedule. What is guaranteed is the scheduler's: the claim of an
// occurrence is unique; a job's effects are exactly-once only if the command
// or endpoint fences them with LEASEHOLD_TOKEN / Leasehold-Token or
// de-duplicates them by job and instant.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/doctor"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/internal/sdnotify"
	"github.com/leasehold/leasehold/internal/supervisor"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/schedule"
)

// Daemon runs the jobs of one Config.
type Daemon struct {
	cfg   *Config
	b     backend.Backend
	log   *slog.Logger
	sched *schedule.Scheduler
	idlk  *leasehold.Locker // holds the instance id; its owner name says which process (instance.go)
	admin *admin.Server     // nil when http.listen is off

	client *http.Client
	scrub  *redact.Scrubber // grows with the secrets of reloaded jobs
	// supervisors keeps a command supervisor spawned ahead of the next
	// command job's run (internal/supervisor); closed when Run returns.
	supervisors *supervisor.Pool
	hooks       *hookRunner // on_failure hooks; Run waits for them

	mu      sync.Mutex     // guards cfg.Jobs, jobs and holding (Reload, suspendJobs, resumeJobs)
	jobs    []schedule.Job // cfg.Jobs, built
	holding bool           // jobs are registered with sched (false while the instance id is lost)

	tokenFile, tokenSecret string // the generated admin token, if used
	tokenCreated           bool

	// recheckEvery is how often the backend's declaration is read again
	// (RecheckGuaranteesEvery; tests shorten it).
	recheckEvery time.Duration

	adminMu   sync.Mutex
	adminAddr net.Addr
	ready     chan struct{} // closed once Run holds the instance id and the API listens
}

// New prepares a daemon for cfg over l, which must keep a run ledger
// (implement backend.Ledger; otherwise the error wraps backend.ErrNoLedger
// and names the backend). It does not start anything. adminOpts are passed
// to the admin API server (admin.WithHandler mounts more handlers); the
// config's http section sets its address, tokens and TLS.
func New(cfg *Config, l backend.Leases, log *slog.Logger, adminOpts ...admin.Option) (*Daemon, error) {
	b, err := backend.LedgerOf(l)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	scrub := cfg.scrubber()
	// Secrets never in the log: the backend URL's password, job URLs'
	// credentials and the API tokens are masked in every line.
	log = slog.New(redact.Handler(log.Handler(), scrub))
	log = log.With("instance", cfg.Instance) // on every line of the daemon, its scheduler and its API
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	client := &http.Client{}
	supervisors := supervisor.NewPool("", outputWait)
	hooks := newHookRunner(cfg, b, supervisors, log)
	hooks.use(cfg)
	sched, err := schedule.New(b, leasehold.WithInstance(cfg.Instance), leasehold.WithNamespace(cfg.Namespace), schedule.WithObserver(scheduleObserver{m, hooks}),
		leasehold.WithLogger(log), schedule.WithGrace(time.Duration(cfg.Grace)), schedule.WithRetention(time.Duration(cfg.Retention)))
	if err != nil {
		return nil, err
	}
	jobs, err := buildJobs(cfg, client, scrub, log, supervisors, hooks)
	if err != nil {
		return nil, err
	}
	for _, sj := range jobs {
		if err := sched.Register(sj); err != nil {
			return nil, err
		}
	}
	self, known := selfProc()
	idlk, err := leasehold.NewLocker(b, leasehold.WithInstance(ownerName(cfg.Instance, self, known)), leasehold.WithNamespace(cfg.Namespace),
		leasehold.WithLogger(log), leasehold.WithObserver(m))
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, b: b, log: log, sched: sched, idlk: idlk, client: client, scrub: scrub,
		supervisors: supervisors, hooks: hooks, jobs: jobs, holding: true, ready: make(chan struct{}), recheckEvery: RecheckGuaranteesEvery}
	if cfg.HTTP.Listen != HTTPOff {
		// /metrics behind the API's read scope (job names, instance names
		// and counts are not for everyone once the listener needs tokens);
		// /healthz and /readyz open, for probes that cannot send tokens.
		routes, err := metrics.Routes(reg, b, cfg.Namespace)
		if err != nil {
			return nil, err
		}
		for pattern, h := range routes {
			if pattern == "GET /metrics" {
				adminOpts = append(adminOpts, admin.WithScopedHandler(pattern, h, admin.ScopeRead))
				continue
			}
			adminOpts = append(adminOpts, admin.WithHandler(pattern, h))
		}
		adminOpts = append(adminOpts, admin.WithRedaction(scrub.Text))
		if d.admin, err = d.newAdmin(cfg, b, sched, log, adminOpts); err != nil {
			return nil, err
		}
		if err := reg.Register(newJobStateCollector(d.admin, b, cfg.Namespace, log)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// RecheckGuaranteesEvery is how often a running daemon reads its backend's
// declaration again, where it rests on the server's live configuration
// (backend.CapabilityRefresher: Redis's appendonly, PostgreSQL's
// synchronous_commit), and logs what changed. A minute: a server
// reconfigured to lose grants at a crash is in the log within a minute, for
// a handful of reads a minute the server does not notice.
const RecheckGuaranteesEvery = time.Minute

// instanceKey is the lock a daemon holds while it runs, so that a second
// daemon with the same instance id refuses to start.
func instanceKey(instance string) string { return "instances/" + instance }

// Scheduler returns the daemon's scheduler (for triggers and status).
func (d *Daemon) Scheduler() *schedule.Scheduler { return d.sched }

// Run takes the instance id, runs the jobs until ctx ends, then shuts down
// gracefully: stop claiming, let running jobs finish within the grace
// period, release leases. It returns nil when ctx ended it.
//
// The instance id is a lease that only one daemon holds at a time. If
// another process holds it, Run logs who (ErrInstanceAlreadyRunning) and waits
// until the lease is released or expires — unless the holder is a previous
// process on this host, same boot, whose pid is gone (a kill -9 leaves
// its lease behind): then Run takes the id over at once. If the lease is
// lost while running (the process was paused past the lease's TTL, or the
// backend was unreachable), the daemon stops claiming — its job timers are
// stopped; runs already started go on under their own leases — takes the
// id again the same way, and resumes.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.supervisors.Close()
	decl := d.warnGuarantees(ctx)
	if _, ok := d.b.(backend.CapabilityRefresher); ok {
		wctx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			d.watchGuarantees(wctx, decl)
		}()
		defer func() { stop(); <-watched }()
	}
	id, err := d.holdInstance(ctx)
	if err != nil {
		return nil // ctx ended while waiting for the id: nothing started
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = id.Release(rctx)
	}()
	if err := d.sched.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	advised := make(chan struct{})
	actx, stopAdvice := context.WithCancel(ctx)
	go func() { defer close(advised); d.adviseRefused(actx) }()
	defer func() { stopAdvice(); <-advised }()
	go func() {
		// Start-up (every job's schedule version read and recorded, its
		// catch-up read) leaves the heap grown by its garbage — some 30 MB
		// at 10,000 jobs — which the runtime gives back to the OS only
		// slowly, and an idle daemon would hold it for as long as it
		// idles. Give it back once, when start-up is over.
		select {
		case <-d.sched.StartedUp():
			debug.FreeOSMemory()
		case <-ctx.Done():
		}
	}()
	stopAdmin, err := d.serveAdmin()
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Duration(d.cfg.Grace)+10*time.Second)
		defer cancel()
		_ = d.sched.Shutdown(sctx)
		return err
	}
	defer stopAdmin()
	close(d.ready)
	// Under systemd (Type=notify): started now, and the watchdog's pings.
	notify, nerr := sdnotify.FromEnv()
	if nerr != nil {
		d.log.Warn("systemd watchdog not served", "err", nerr)
	}
	if err := notify.Send("READY=1\nSTATUS=running"); err != nil {
		d.log.Warn("systemd notification failed", "err", err)
	}
	defer notify.Watchdog(func() bool { return true })()
	d.mu.Lock()
	njobs := len(d.jobs)
	d.mu.Unlock()
	d.log.Info("leasehold daemon running", "namespace", d.cfg.Namespace,
		"backend", redactURL(d.cfg.Backend), "jobs", njobs, "token", id.Token())
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-id.Done():
			d.log.Error("instance id lease lost (paused past its TTL, or the backend unreachable?): claiming nothing until it is held again",
				"err", context.Cause(id.Context()))
			d.suspendJobs()
			next, err := d.holdInstance(ctx)
			if err != nil {
				break // ctx ended
			}
			id = next
			d.resumeJobs()
			d.log.Info("instance id held again: claiming resumed", "token", id.Token())
		}
	}
	d.log.Info("shutting down: no new claims; running jobs get the grace period", "grace", time.Duration(d.cfg.Grace))
	_ = notify.Send("STOPPING=1\nSTATUS=stopping: running jobs get the grace period")
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(d.cfg.Grace)+10*time.Second)
	defer cancel()
	runErr := d.sched.Shutdown(sctx)
	d.hooks.stop(time.Duration(d.cfg.Grace)) // the runs that failed at shutdown call theirs
	d.log.Info("stopped")
	return runErr
}

// warnGuarantees reads the backend's declaration again (doctor.Declare)
// and logs each guarantee it does not give, with its reason: the warnings
// "leasehold doctor" prints (internal/doctor), from the same function.
func (d *Daemon) warnGuarantees(ctx context.Context) doctor.Declaration {
	decl := d.declare(ctx)
	if doctor.HostLocal(decl.Capabilities) {
		d.log.Warn("backend local to this host", "backend", decl.Capabilities.Name, "note", doctor.LocalNote)
	}
	for _, w := range decl.Warnings() {
		d.log.Warn("backend guarantee not given", "backend", decl.Capabilities.Name, "warning", w)
	}
	return decl
}

// declare reads the backend's declaration, bounded to 10 s.
func (d *Daemon) declare(ctx context.Context) doctor.Declaration {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return doctor.Declare(dctx, d.b)
}

// watchGuarantees reads the backend's declaration again every
// recheckEvery, from was (the one logged at start), until ctx ends, and
// logs each capability that changed (a warning when it withdraws a
// guarantee) and a configuration that can no longer be read (which
// withdraws what rests on it).
func (d *Daemon) watchGuarantees(ctx context.Context, was doctor.Declaration) {
	t := time.NewTicker(d.recheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := d.declare(ctx)
		if ctx.Err() != nil {
			return // a read cut short by shutdown says nothing of the server
		}
		name := now.Capabilities.Name
		if now.RefreshErr != nil && was.RefreshErr == nil {
			d.log.Warn("backend configuration could not be read again: the guarantees resting on it are not claimed", "backend", name, "err", now.RefreshErr)
		}
		if now.RefreshErr == nil && was.RefreshErr != nil {
			d.log.Info("backend configuration read again", "backend", name)
		}
		for _, c := range doctor.Changes(was, now) {
			level := slog.LevelInfo // a guarantee given again
			if c.Warn {
				level = slog.LevelWarn // a guarantee withdrawn
			}
			d.log.Log(ctx, level, "backend guarantee changed", "backend", name, "change", c.String(),
				"read_at", now.Capabilities.ReadAt.UTC().Format(time.RFC3339Nano))
		}
		was = now
	}
}
