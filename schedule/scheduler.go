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
	"github.com/leasehold/leasehold/internal/option"
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

// Option configures a Scheduler. It is leasehold.Option, the one option
// type of leasehold's constructors: the shared leasehold.WithInstance,
// WithNamespace, WithDrift, WithMargin and WithLogger configure a Scheduler
// as they do a Locker, and the options of this package configure a
// Scheduler only (a Locker's constructor refuses them). Every option
// validates its argument; New returns the first error, wrapping
// leasehold.ErrInvalid and naming the option and the value.
type Option = leasehold.Option

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

// own is an option that sets a Scheduler's own config; other constructors
// refuse it.
func own(name string, set func(*config) error) Option {
	return func(oc *option.Config) error {
		c, ok := oc.Own.(*config)
		if !ok {
			return fmt.Errorf("%w: schedule.%s configures a Scheduler, not %s", leasehold.ErrInvalid, name, oc.For)
		}
		return set(c)
	}
}

// WithInstance names this instance (default: host name).
//
// Deprecated: use leasehold.WithInstance, which configures a Scheduler too.
func WithInstance(name string) Option { return leasehold.WithInstance(name) }

// WithNamespace sets the namespace of the scheduler's leader election
// (default "default").
//
// Deprecated: use leasehold.WithNamespace, which configures a Scheduler too.
func WithNamespace(ns string) Option { return leasehold.WithNamespace(ns) }

// WithLogger sets the logger (default: discard).
//
// Deprecated: use leasehold.WithLogger, which configures a Scheduler too.
func WithLogger(l *slog.Logger) Option { return leasehold.WithLogger(l) }

// WithDrift sets the assumed worst clock-rate difference between this host
// and the backend, as a fraction in [0, 0.5) (default 0.01): a run's
// deadline — when its context is cancelled unless a heartbeat was
// confirmed — is shortened by LeaseTTL × drift.
//
// Deprecated: use leasehold.WithDrift, which configures a Scheduler too.
func WithDrift(f float64) Option { return leasehold.WithDrift(f) }

// WithMargin sets a fixed safety margin subtracted from a run's deadline
// (default, per job, min(LeaseTTL/20, 500 ms)).
//
// Deprecated: use leasehold.WithMargin, which configures a Scheduler too.
func WithMargin(d time.Duration) Option { return leasehold.WithMargin(d) }

// WithClock injects the clock (default: system clock); it must not be nil.
func WithClock(cl Clock) Option {
	return own("WithClock", func(c *config) error {
		if cl == nil {
			return fmt.Errorf("%w: WithClock(nil): the clock is nil", leasehold.ErrInvalid)
		}
		c.clock = cl
		return nil
	})
}

// WithGrace sets how long Shutdown lets running jobs finish before
// cancelling them (default 30 s); it must not be negative.
func WithGrace(d time.Duration) Option {
	return own("WithGrace", func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithGrace(%v): negative", leasehold.ErrInvalid, d)
		}
		c.grace = d
		return nil
	})
}

// WithClaimTolerance sets how early, by the backend's clock, an occurrence
// may be claimed (default 1 s; not negative): an instance whose clock runs
// ahead cannot claim earlier than that.
func WithClaimTolerance(d time.Duration) Option {
	return own("WithClaimTolerance", func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithClaimTolerance(%v): negative", leasehold.ErrInvalid, d)
		}
		c.tolerance = d
		return nil
	})
}

// WithRetention sets how long finished runs are kept in history (default 7
// days; positive; pruned at start-up and hourly in bounded batches). Every
// job's misfire window must be shorter.
func WithRetention(d time.Duration) Option {
	return positive("WithRetention", d, func(c *config) { c.retention = d })
}

// WithSweepEvery sets how often the scheduler looks for occurrences whose
// runner died (default 5 s; positive).
func WithSweepEvery(d time.Duration) Option {
	return positive("WithSweepEvery", d, func(c *config) { c.sweepEvery = d })
}

// WithVersionSettle sets how far ahead a new schedule version's switch
// instant is placed, so that instances still running the old version learn
// of it before it arrives (default 10 s). It must exceed the claim
// tolerance, which New checks once all options are applied.
func WithVersionSettle(d time.Duration) Option {
	return positive("WithVersionSettle", d, func(c *config) { c.settle = d })
}

// positive is the Option named name that refuses a d not above 0 and
// otherwise sets it.
func positive(name string, d time.Duration, set func(*config)) Option {
	return own(name, func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: %s(%v): not positive", leasehold.ErrInvalid, name, d)
		}
		set(c)
		return nil
	})
}

// Scheduler runs registered jobs. Create it with New, register jobs, Start
// it, and Shutdown it.
type Scheduler struct {
	b   backend.Backend
	l   backend.Ledger // b's ledger confined to the namespace (namespace.go)
	cfg config

	mu        sync.Mutex
	jobs      map[string]*entry
	carried   carriedJobs // jobs whose earlier release's records are carried over (legacy.go)
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
	// removed holds, per job removed or replaced, its schedule version,
	// the latest instant its timer handled and the instants before it not
	// settled yet: registered again with the same schedule, the job
	// continues from there and claims those (resumeCursor, handback.go).
	removed map[string]stoppedTimer
}

type entry struct {
	job  Job
	spec *Spec
	vc   versionCache
	// inflight counts this entry's occurrences being claimed or run here.
	inflight atomic.Int32
	// retrying counts this entry's failed runs whose retry is pending
	// here (holdForRetry until retryWhenDue returns): each holds one of
	// the job's MaxConcurrent slots, also at the instant its lease lapses
	// and the retry reclaims it.
	retrying atomic.Int32
	queue    runQueue // catch-up claims, one after another
	// waits holds the instants dispatched (by the timer, catch-up or
	// takeBack) whose claims have not settled: handed back at Remove.
	waits waitSet
	// handed is the instants the job's previous registration handed
	// back, claimed by takeBack; dropped those its new schedule does not
	// claim (dropHanded). Both are set by put and used once by the
	// entry's start-up.
	handed, dropped []*waiting
	// recovering holds the instants (Unix ns) of the entry's occurrences
	// whose recovery is under way here (recoverRun).
	recovering inProgress
	ctx        context.Context // the entry's claims; cancelled when it is stopped
	cancel     context.CancelFunc
	done       chan struct{} // closed when its start-up work ended
	// next is the instant the entry's timer waits for, cursor the latest
	// instant handled; slot is its place in s.timers, -1 when not in it.
	// resume, if not zero, is the instant the timer of the same job
	// (same schedule) removed before had handled last: the timer continues
	// from it, not from now (resumeCursor).
	resume time.Time
	// All three are guarded by s.timers.mu once start-up ended, except
	// while timerLoop handles the entry out of the heap (slot -1, firing
	// held).
	next, cursor time.Time
	slot         int
	// firing is held while timerLoop handles the entry (timerHeap.remove
	// waits for it).
	firing sync.Mutex
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
	oc := option.Config{
		Shared: option.Shared{Instance: c.instance, Namespace: c.namespace, Drift: c.lease.drift, Margin: c.lease.margin, Logger: c.logger},
		For:    "a Scheduler",
		Own:    &c,
	}
	if err := option.Apply(&oc, opts); err != nil {
		return nil, err
	}
	c.instance, c.namespace, c.lease.drift, c.lease.margin, c.logger = oc.Instance, oc.Namespace, oc.Drift, oc.Margin, oc.Logger
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
// If j's schedule version is the old job's, j continues from the old
// timer's last instant and claims the instants the old job had not settled
// (waiting on their jitter delay or in the catch-up queue), or applies the
// misfire policy to those late by then; with another schedule it skips
// them and reports them as a misfire (docs/semantics.md, "A job registered
// again"). Register after Remove does the same.
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
		return fmt.Errorf("%w: %q", ErrJobAlreadyRegistered, j.Name)
	}
	if old != nil {
		s.stopEntry(old)
	}
	e := &entry{job: j, spec: spec, slot: -1}
	e.resume, e.handed, e.dropped = s.resumeCursor(j.Name, spec)
	if j.Mode == EveryInstance {
		e.handed, e.dropped = nil, append(e.dropped, e.handed...) // it claims nothing
	}
	for _, w := range e.handed {
		e.waits.add(w) // removed again before its start-up: handed back again
	}
	s.jobs[j.Name] = e
	if s.started {
		s.startEntry(e, nil)
	}
	return nil
}

// Remove unregisters a job; its runs already started go on. The instants
// its timer handled whose claims had not settled (waiting on their jitter
// delay or in the catch-up queue) are kept for the job registered again
// (see Replace); if it is not, they are not claimed here.
func (s *Scheduler) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[name]
	if e == nil {
		return fmt.Errorf("%w: %q", ErrJobNotFound, name)
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
	if !e.resume.IsZero() && e.resume.Before(cursor) {
		cursor = e.resume
	}
	if e.job.Mode == EveryInstance {
		// No start-up backend work: no slot to wait for behind jobs whose
		// start-up is stuck on the backend.
		close(e.done)
		if started != nil {
			started()
		}
		if dropped := e.dropped; len(dropped) > 0 {
			e.dropped = nil
			s.loops.Add(1) // not under s.mu: it tells the observer
			go func() { defer s.loops.Done(); s.dropHanded(ctx, e, dropped) }()
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
		if dropped := e.dropped; len(dropped) > 0 {
			// Apart: it waits for the previous registration's claims.
			e.dropped = nil
			s.loops.Add(1)
			go func() { defer s.loops.Done(); s.dropHanded(ctx, e, dropped) }()
		}
		s.takeBack(ctx, e)
		s.addTimer(e, cursor)
	}()
	if e.job.Mode == Leader {
		s.leading.start(s, ctx)
	}
}

// Start starts the registered jobs' timers, the crash sweeper and the
// history pruner. It returns at once. When ctx ends (a signal), nothing more
// is claimed, but running jobs go on: only Shutdown's grace period ends
// them. So the usual pattern is
//
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	_ = s.Start(ctx)
//	defer s.Shutdown(ctx) // waits for running jobs, up to the grace period
//	<-ctx.Done()
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("%w: scheduler already started", leasehold.ErrInvalid)
	}
	s.started = true
	s.loopCtx, s.stop = context.WithCancel(ctx)
	// Runs outlive ctx: only Shutdown's grace cancels them.
	s.jobCtx, s.kill = context.WithCancelCause(context.WithoutCancel(ctx))
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

// Shutdown stops claiming, lets running jobs finish within the grace period
// (WithGrace), then cancels them (cause ErrShutdown) and waits for them to
// return and record their outcome. A ctx that ends meanwhile cuts both
// waits short (the error says jobs were still running) — except a ctx that
// had already ended when Shutdown was called, such as the signal context
// Start was given in `defer s.Shutdown(ctx)`: then the grace is whole, and
// cancelled jobs get up to another grace period to return.
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
	deadline, cut := ctx.Done(), ctx.Err() == nil
	if !cut {
		deadline = nil // the context that started the shutdown, not a bound on it
	}
	select {
	case <-finished:
		return nil
	case <-s.cfg.clock.After(s.cfg.grace):
	case <-deadline:
	}
	s.kill(ErrSchedulerShutdown)
	if !cut {
		stopped := s.cfg.clock.After(s.cfg.grace)
		select {
		case <-finished:
			return nil
		case <-stopped:
			return fmt.Errorf("leasehold/schedule: jobs still running at shutdown, a grace period (%v) after they were cancelled", s.cfg.grace)
		}
	}
	select {
	case <-finished:
		return nil
	case <-deadline:
		return fmt.Errorf("leasehold/schedule: jobs still running at shutdown: %w", ctx.Err())
	}
}
