// Package schedule runs cron jobs on many instances so that each occurrence
// of a job — job name + scheduled instant — is claimed by exactly one
// instance through the backend's run ledger.
//
// What is guaranteed, precisely: the claim of an occurrence is unique (the
// first claim wins; every later one is told who holds it). Execution is
// at-least-once under CrashRetry (a runner that dies is replaced, with a
// greater token and attempt+1) or at-most-once under CrashSkip (the
// occurrence is marked abandoned). A Retry policy retries failed runs too,
// after a backoff, each retry a reclaim with a greater token and
// attempt+1 (at-least-once). A job's effects are exactly-once only when
// it writes them through a sink that is idempotent by Job+ScheduledAt (a
// unique key, an upsert): under CrashRetry a runner that wrote its effect
// and died before recording the finish is run again, with a greater token,
// so a sink that only rejects lower fencing tokens (Run.Token) accepts both
// writes. Fencing is what keeps a stale runner (paused past its lease) from
// overwriting a newer runner's effect.
//
// Every instance computes the same instants (see Spec). A change of a job's
// schedule during a rolling deploy takes effect at a switch instant recorded
// in the ledger: instants before it are claimed only by instances running
// the old spec, instants from it on only by the new one, so the two
// versions' instants never both run.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/keeper"
)

// Clock is the scheduler's source of time. Tests inject one; the default is
// the system clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Option configures a Scheduler.
type Option func(*config)

type config struct {
	instance   string
	namespace  string
	clock      Clock
	logger     *slog.Logger
	grace      time.Duration
	tolerance  time.Duration
	retention  time.Duration
	sweepEvery time.Duration
	settle     time.Duration
	lease      leaseTiming // runs' drift and margin
	observer   Observer    // nil: none
}

// WithInstance names this instance (default: host name).
func WithInstance(name string) Option { return func(c *config) { c.instance = name } }

// WithNamespace sets the namespace of the scheduler's leader election
// (default "default").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithClock injects the clock (default: system clock).
func WithClock(cl Clock) Option { return func(c *config) { c.clock = cl } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithGrace sets how long Shutdown lets running jobs finish before
// cancelling them (default 30 s).
func WithGrace(d time.Duration) Option { return func(c *config) { c.grace = d } }

// WithClaimTolerance sets how early, by the backend's clock, an occurrence
// may be claimed (default 1 s): an instance whose clock runs ahead cannot
// claim earlier than that.
func WithClaimTolerance(d time.Duration) Option { return func(c *config) { c.tolerance = d } }

// WithRetention sets how long finished runs are kept in history (default 7
// days; pruned at start-up and hourly in bounded batches). Every job's
// misfire window must be shorter.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// WithSweepEvery sets how often the scheduler looks for occurrences whose
// runner died (default 5 s).
func WithSweepEvery(d time.Duration) Option { return func(c *config) { c.sweepEvery = d } }

// WithVersionSettle sets how far ahead a new schedule version's switch
// instant is placed, so that instances still running the old version learn
// of it before it arrives (default 10 s).
func WithVersionSettle(d time.Duration) Option { return func(c *config) { c.settle = d } }

// WithDrift sets the assumed worst clock-rate difference between this host
// and the backend, as a fraction in [0, 0.5) (default 0.01), as
// leasehold.WithDrift does for locks: a run's deadline — when its context
// is cancelled unless a heartbeat was confirmed — is shortened by
// LeaseTTL × drift.
func WithDrift(f float64) Option { return func(c *config) { c.lease.drift = f } }

// WithMargin sets a fixed safety margin subtracted from a run's deadline
// (default, per job, min(LeaseTTL/20, 500 ms)), as leasehold.WithMargin
// does for locks. Register refuses a job whose LeaseTTL leaves no more than
// a heartbeat interval (LeaseTTL/3) after drift and margin.
func WithMargin(d time.Duration) Option { return func(c *config) { c.lease.margin = d } }

// Scheduler runs registered jobs. Create it with New, register jobs, Start
// it, and Shutdown it.
type Scheduler struct {
	b   backend.Backend
	l   backend.Ledger // b's ledger confined to the namespace (namespace.go)
	cfg config

	mu        sync.Mutex
	jobs      map[string]*entry
	started   bool
	loopCtx   context.Context // parent of the timers and the entries; cancelled by Shutdown
	stop      context.CancelFunc
	jobCtx    context.Context // parent of running job functions; cancelled after the grace period
	kill      context.CancelCauseFunc
	loops     sync.WaitGroup
	runs      sync.WaitGroup
	leading   leaderState
	timers    *timerHeap    // every started entry's next instant (timers.go)
	startup   chan struct{} // a slot per job doing its start-up work at once
	startedUp chan struct{} // closed when the jobs of Start did their start-up (StartedUp)
	// sweepPage is the first page size of a sweep (sweepPage; tests set
	// it smaller).
	sweepPage int
}

type entry struct {
	job  Job
	spec *Spec
	vc   versionCache
	// inflight counts this entry's occurrences being claimed or run here.
	inflight atomic.Int32
	queue    runQueue        // catch-up claims, one after another
	ctx      context.Context // the entry's claims; cancelled when it is stopped
	cancel   context.CancelFunc
	done     chan struct{} // closed when its start-up work ended
	// next is the instant the entry's timer waits for, cursor the latest
	// instant handled; slot is its place in s.timers, -1 when not in it.
	// All three are guarded by s.timers.mu once start-up ended.
	next, cursor time.Time
	slot         int
}

// New returns a Scheduler over l, which must keep a run ledger (implement
// backend.Ledger): otherwise the error wraps backend.ErrNoLedger and names
// the backend.
func New(l backend.Leases, opts ...Option) (*Scheduler, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: backend is nil", leasehold.ErrInvalid)
	}
	b, err := backend.LedgerOf(l)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	c := config{
		instance: host, namespace: leasehold.DefaultNamespace, clock: systemClock{},
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		grace:  30 * time.Second, tolerance: time.Second, retention: 7 * 24 * time.Hour,
		sweepEvery: 5 * time.Second, settle: 10 * time.Second, lease: defaultLease,
	}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.instance == "" || len(c.instance) > backend.MaxInstanceLen:
		return nil, fmt.Errorf("%w: instance %q must be 1–%d bytes", leasehold.ErrInvalid, c.instance, backend.MaxInstanceLen)
	case c.clock == nil || c.logger == nil:
		return nil, fmt.Errorf("%w: clock and logger must not be nil", leasehold.ErrInvalid)
	case c.grace < 0:
		return nil, fmt.Errorf("%w: grace %v is negative", leasehold.ErrInvalid, c.grace)
	case c.tolerance < 0:
		return nil, fmt.Errorf("%w: claim tolerance %v is negative", leasehold.ErrInvalid, c.tolerance)
	case c.retention <= 0:
		return nil, fmt.Errorf("%w: retention %v is not positive", leasehold.ErrInvalid, c.retention)
	case c.sweepEvery <= 0:
		return nil, fmt.Errorf("%w: sweep every %v is not positive", leasehold.ErrInvalid, c.sweepEvery)
	case c.settle <= c.tolerance:
		return nil, fmt.Errorf("%w: version settle %v must exceed the claim tolerance %v", leasehold.ErrInvalid, c.settle, c.tolerance)
	}
	if err := leasehold.ValidatePath("namespace", c.namespace); err != nil {
		return nil, err
	}
	if err := (keeper.Timing{Drift: c.lease.drift, Margin: c.lease.margin}).Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", leasehold.ErrInvalid, err)
	}
	return &Scheduler{b: b, l: NamespaceLedger(b, c.namespace), cfg: c, jobs: map[string]*entry{},
		timers: newTimerHeap(), startup: make(chan struct{}, startupWorkers), sweepPage: sweepPage,
		startedUp: make(chan struct{})}, nil
}

// Register adds a job. A name registered before is rejected with
// ErrDuplicateJob; use Replace to change a job.
func (s *Scheduler) Register(j Job) error { return s.put(j, false) }

// Replace registers j, replacing a job of the same name if there is one.
// The old job's timer is stopped before the new one starts, so there are
// never two timers for one name; runs of the old job already started go on.
func (s *Scheduler) Replace(j Job) error { return s.put(j, true) }

func (s *Scheduler) put(j Job, replace bool) error {
	j, spec, err := j.withDefaults(s.cfg.retention)
	if err != nil {
		return err
	}
	if err := CheckKeyLengths(s.cfg.namespace, j.Name); err != nil {
		return err
	}
	if err := s.cfg.lease.check(j.LeaseTTL); err != nil {
		return &FieldError{Field: "LeaseTTL", Err: fmt.Errorf("job %q: %w", j.Name, err)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.jobs[j.Name]
	if old != nil && !replace {
		return fmt.Errorf("%w: %q", ErrDuplicateJob, j.Name)
	}
	if old != nil {
		s.stopEntry(old)
	}
	e := &entry{job: j, spec: spec, slot: -1}
	s.jobs[j.Name] = e
	if s.started {
		s.startEntry(e, nil)
	}
	return nil
}

// Remove unregisters a job; its runs already started go on.
func (s *Scheduler) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[name]
	if e == nil {
		return fmt.Errorf("%w: %q", ErrUnknownJob, name)
	}
	s.stopEntry(e)
	delete(s.jobs, name)
	return nil
}

// Jobs returns the registered jobs' names and next instants after now.
func (s *Scheduler) Jobs() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Time{}
	now := s.cfg.clock.Now()
	for n, e := range s.jobs {
		out[n] = e.spec.Next(now)
	}
	return out
}

// stopEntry stops e's timer, waiting for its start-up work to end; s.mu is
// held. Once it returns, e claims nothing more.
func (s *Scheduler) stopEntry(e *entry) {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		s.timers.remove(e)
		e.cancel = nil
	}
}

// startEntry starts e's start-up work, then its timer; started (if not
// nil) is called when the start-up work ended.
func (s *Scheduler) startEntry(e *entry, started func()) {
	e.ctx, e.cancel = context.WithCancel(s.loopCtx)
	e.done = make(chan struct{})
	ctx := e.ctx
	// The job's instants count from now, not from when a start-up slot
	// frees: those that come due while it waits are on time or misfires
	// for its timer, as when every job started at once.
	cursor := s.cfg.clock.Now()
	if e.job.Mode == EveryInstance {
		// No start-up backend work: no slot to wait for behind jobs whose
		// start-up is stuck on the backend.
		close(e.done)
		if started != nil {
			started()
		}
		s.addTimer(e, cursor)
		return
	}
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		defer close(e.done)
		if started != nil {
			defer started()
		}
		select {
		case s.startup <- struct{}{}:
		case <-ctx.Done():
			return
		}
		cursor := s.startUp(ctx, e, cursor)
		<-s.startup
		s.addTimer(e, cursor)
	}()
	if e.job.Mode == Leader {
		s.leading.start(s, ctx)
	}
}

// Start starts the registered jobs' timers, the crash sweeper and the
// history pruner. It returns at once; ctx ends them like Shutdown without
// grace.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("%w: scheduler already started", leasehold.ErrInvalid)
	}
	s.started = true
	s.loopCtx, s.stop = context.WithCancel(ctx)
	s.jobCtx, s.kill = context.WithCancelCause(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, func() { s.kill(context.Cause(ctx)) })
	var initial sync.WaitGroup
	initial.Add(len(s.jobs))
	for _, e := range s.jobs {
		s.startEntry(e, initial.Done)
	}
	go func() { initial.Wait(); close(s.startedUp) }()
	s.loops.Add(3)
	go func() { defer s.loops.Done(); s.timerLoop(s.loopCtx) }()
	go func() { defer s.loops.Done(); s.sweepLoop(s.loopCtx) }()
	go func() { defer s.loops.Done(); s.pruneLoop(s.loopCtx) }()
	return nil
}

// StartedUp returns a channel closed once every job registered when Start
// was called has done its start-up work (recorded its schedule version,
// queued its catch-up) or was stopped before: from then on, until
// something comes due, the scheduler only waits. It is never closed if
// Start is never called.
func (s *Scheduler) StartedUp() <-chan struct{} { return s.startedUp }

// ErrShutdown is the cause of a running job's context when Shutdown's grace
// period ran out.
var ErrShutdown = errors.New("leasehold/schedule: shut down")

// Shutdown stops claiming, lets running jobs finish within the grace period
// (or until ctx ends), then cancels them and waits for them to return and
// record their outcome.
func (s *Scheduler) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		s.mu.Unlock()
		return nil
	}
	s.stop()
	s.mu.Unlock()
	s.loops.Wait()
	finished := make(chan struct{})
	go func() { s.runs.Wait(); close(finished) }()
	grace := s.cfg.clock.After(s.cfg.grace)
	select {
	case <-finished:
		return nil
	case <-grace:
	case <-ctx.Done():
	}
	s.kill(ErrShutdown)
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leasehold/schedule: jobs still running at shutdown: %w", ctx.Err())
	}
}
