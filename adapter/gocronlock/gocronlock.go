// Package gocronlock brings go-co-op/gocron/v2 schedulers onto leasehold
// without rewriting their jobs: a gocron.Locker that claims each
// *occurrence* once in the run ledger, and a gocron.Elector backed by a
// leasehold election.
//
// Why not a plain lock: gocron hands a Locker only the job's name and
// unlocks as soon as the job returns. A fast job on one instance releases
// the name before a slower instance's timer fires, and that instance runs
// the same occurrence again (gocron issue #841). This Locker keys the claim
// by job name and the occurrence's scheduled instant, and an occurrence once
// claimed is never claimed again, however late the other timers fire.
//
// Naming the occurrence. gocron (v2.21) tells a Locker neither the instant
// a timer was set for nor the job's schedule: Lock gets the job's name and
// the job's long-lived context, and Job.NextRun read from inside Lock races
// with gocron's rescheduling, which appends the next instant and prunes past
// ones concurrently (it may answer the due instant or the next one). So the
// Locker works the instant out from the time it is called:
//
//   - NewJobLocker knows the job's own cron spec (the one given to
//     gocron.CronJob) and names the latest scheduled instant at or before
//     the call. Give it to that one job with gocron.WithDistributedJobLocker.
//   - NewLocker knows only a period Q (set it to the spec's resolution: 1 s
//     for a spec with a seconds field, 1 m for a five-field spec, the step
//     for "*/N") and names the latest multiple of Q since the Unix epoch at
//     or before the call. It serves every job of a scheduler
//     (gocronlock.NewScheduler, or gocron.WithDistributedLocker and Attach)
//     whose instants are multiples of Q.
//
// Either way the call may come a little early too (a timer counts on the
// monotonic clock, the wall clock can be slewed meanwhile): a call within
// E(t) = min(G/10, 1 s) before an instant t names t, where G is the gap
// between t and the instant before it (Q for NewLocker).
//
// The exact bound: every instance names occurrence s alike — so it runs
// once — if each instance's timer for s fires, by that instance's wall
// clock, no earlier than E(s) before s and earlier than E(s') before the next
// instant s'. Rounding to the nearest multiple of Q (what this package
// did before) put the boundary at s + Q/2, where a 2 ms skew between two
// late timers gave two keys and both ran. A timer later than s' − E(s') names
// s' instead: it does not run s, and claims s' before s' is due (then the
// on-time timers of s' are refused). A clock that is off by more than these
// bounds names the wrong occurrence the same way. The backend also refuses
// a claim for an instant t more than E(t) + 1 s ahead of its own clock.
//
// Use cron-spec jobs (all instances fire at the same instants); a gocron
// DurationJob counts from each scheduler's start, so its instances have no
// common instants to agree on, and different instances would name one
// occurrence differently and run it twice. Lock refuses such a job at run
// time: Attach the scheduler to the Locker (NewScheduler does), so that Lock
// sees each job's definition. It then refuses (ErrJobDurationBased) a
// DurationJob, a DurationRandomJob or a robfig "@every" spec, refuses
// (ErrJobSpecMismatch) a job whose cron spec is not the one NewJobLocker was
// given, or whose instants are not multiples of NewLocker's quantum, and
// logs each refusal once per job. A Locker with no scheduler attached
// refuses every Lock (ErrLockerNotAttached).
//
// The job's fencing token: a job whose task takes a context.Context as its
// first parameter gets the same context Lock got; Locker.Run(ctx) returns
// the claimed occurrence, with its token, while the job runs.
//
// Shutdown: a job that runs through gocron's Shutdown has its outcome
// written when it returns, for at most 5 s once Shutdown has begun (gocron
// also ends the context of a job it removes, e.g. after WithLimitedRuns:
// the same 5 s apply); give
// gocron.WithStopTimeout room for a job's wind-down plus those 5 s, or
// Shutdown returns gocron.ErrStopJobsTimedOut while the write goes on. A
// run whose outcome could not be written is logged, and stays "running"
// in the ledger.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/ctxgrace"
	"github.com/leasehold/leasehold/schedule"
)

// Locker implements gocron.Locker with per-occurrence claims.
type Locker struct {
	b        backend.Ledger // confined to the namespace
	instance string
	quantum  time.Duration  // NewLocker: instants are multiples of it
	spec     *schedule.Spec // NewJobLocker: instants are the spec's
	zone     string         // NewJobLocker's zone
	now      func() time.Time
	cfg      config

	sched   atomic.Pointer[gocron.Scheduler]
	mu      sync.Mutex
	running map[context.Context][]*schedule.Claim // by the job's context, while it runs
	logged  sync.Map                              // job name + reason: refusals already logged
}

// Option tunes NewLocker and NewJobLocker.
type Option func(*config)

type config struct {
	namespace string
	logger    *slog.Logger
}

// WithNamespace confines the Locker's claims to namespace (as
// schedule.NamespaceLedger): two deployments sharing a backend may then use
// the same job names. Default leasehold.DefaultNamespace.
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithLogger sets where Lock's refusals and errors (other than another
// instance's claim) are logged. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker over the ledger b for jobs whose instants are
// multiples of quantum since the Unix epoch (1 s for a per-second cron
// job, 1 m for per-minute; see the package comment for the bound). instance
// names this scheduler in the ledger. Prefer NewJobLocker, which knows the
// job's own instants.
func NewLocker(b backend.Ledger, instance string, quantum time.Duration, opts ...Option) (*Locker, error) {
	if quantum < 10*time.Millisecond {
		return nil, fmt.Errorf("%w: quantum %v is shorter than 10ms", leasehold.ErrInvalid, quantum)
	}
	return newLocker(b, instance, quantum, nil, "", opts)
}

// NewJobLocker returns a Locker over the ledger b for the one gocron job
// scheduled by spec in zone (the spec given to gocron.CronJob; zone "" is
// UTC, or set by a "TZ=" prefix as in gocron). Pass it to that job with
// gocron.WithDistributedJobLocker, and define the job with l.CronJob() so
// the spec is written once. Each call of Lock claims the latest
// instant of spec at or before the call (see the package comment).
func NewJobLocker(b backend.Ledger, instance, spec, zone string, opts ...Option) (*Locker, error) {
	if strings.HasPrefix(strings.TrimSpace(cutZone(spec)), "@every") {
		return nil, fmt.Errorf("%w: spec %q: %w", leasehold.ErrInvalid, spec, ErrJobDurationBased)
	}
	s, err := schedule.Parse(spec, zone)
	if err != nil {
		return nil, fmt.Errorf("%w: spec %q: %w", leasehold.ErrInvalid, spec, err)
	}
	return newLocker(b, instance, 0, s, zone, opts)
}

func newLocker(b backend.Ledger, instance string, quantum time.Duration, spec *schedule.Spec, zone string, opts []Option) (*Locker, error) {
	cfg := config{namespace: leasehold.DefaultNamespace, logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: ledger is nil", leasehold.ErrInvalid)
	case instance == "":
		return nil, fmt.Errorf("%w: instance is empty", leasehold.ErrInvalid)
	case cfg.logger == nil:
		return nil, fmt.Errorf("%w: logger is nil", leasehold.ErrInvalid)
	}
	if err := leasehold.ValidatePath("namespace", cfg.namespace); err != nil {
		return nil, err
	}
	return &Locker{b: schedule.NamespaceLedger(b, cfg.namespace), instance: instance, quantum: quantum, spec: spec, zone: zone,
		now: time.Now, cfg: cfg, running: map[context.Context][]*schedule.Claim{}}, nil
}

// cutZone returns spec without a leading "TZ=" or "CRON_TZ=" zone.
func cutZone(spec string) string {
	s := strings.TrimSpace(spec)
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			_, tail, _ := strings.Cut(rest, " ")
			return tail
		}
	}
	return s
}

// CronJob returns the gocron job definition of a NewJobLocker's spec and
// zone, so that the spec is written once:
//
//	s.NewJob(l.CronJob(), task, gocron.WithName("report"), gocron.WithDistributedJobLocker(l))
//
// It is nil for a NewLocker, which knows no spec.
func (l *Locker) CronJob() gocron.JobDefinition {
	if l.spec == nil {
		return nil
	}
	spec := l.spec.String()
	if l.zone != "" && cutZone(spec) == strings.TrimSpace(spec) {
		spec = "TZ=" + l.zone + " " + spec
	}
	return gocron.CronJob(spec, len(strings.Fields(cutZone(spec))) == 6)
}

// Attach tells l the scheduler it serves, so that Lock can check each
// job's definition (see the package comment). Call it once the scheduler
// exists, before Start; NewScheduler does it for a scheduler-wide Locker.
func (l *Locker) Attach(s gocron.Scheduler) { l.sched.Store(&s) }

// NewScheduler returns a gocron scheduler whose jobs are claimed once per
// occurrence by l (gocron.WithDistributedLocker), with l attached to it.
func NewScheduler(l *Locker, opts ...gocron.SchedulerOption) (gocron.Scheduler, error) {
	s, err := gocron.NewScheduler(append(opts, gocron.WithDistributedLocker(l))...)
	if err != nil {
		return nil, err
	}
	l.Attach(s)
	return s, nil
}

// check refuses a job (named key in the attached scheduler) whose
// instants the Locker cannot name alike on every instance.
func (l *Locker) check(key string) error {
	sp := l.sched.Load()
	if sp == nil {
		return ErrLockerNotAttached
	}
	found := false
	for _, j := range (*sp).Jobs() {
		if j.Name() != key {
			continue
		}
		found = true
		if err := l.checkSchedule(j.Schedule()); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("%w: no job named %q in the attached scheduler (a per-job Locker attached to another scheduler?)", ErrLockerNotAttached, key)
	}
	return nil
}

func (l *Locker) checkSchedule(js gocron.JobSchedule) error {
	switch d := js.(type) {
	case gocron.DurationJobSchedule:
		return fmt.Errorf("%w: DurationJob(%v)", ErrJobDurationBased, d.Duration)
	case gocron.DurationRandomJobSchedule:
		return fmt.Errorf("%w: DurationRandomJob(%v, %v)", ErrJobDurationBased, d.Min, d.Max)
	case gocron.CronJobSchedule:
		if strings.HasPrefix(cutZone(d.Crontab), "@every") {
			return fmt.Errorf("%w: CronJob(%q)", ErrJobDurationBased, d.Crontab)
		}
		if l.spec != nil {
			if cutZone(d.Crontab) != cutZone(l.spec.String()) || zoneOf(d.Crontab, l.zone) != zoneOf(l.spec.String(), l.zone) {
				return fmt.Errorf("%w: the job's spec is %q, the Locker's %q (zone %q): define the job with l.CronJob()", ErrJobSpecMismatch, d.Crontab, l.spec.String(), l.zone)
			}
			return nil
		}
		js, err := schedule.Parse(d.Crontab, "")
		if err != nil {
			return fmt.Errorf("%w: the job's spec %q: %w", ErrJobSpecMismatch, d.Crontab, err)
		}
		t := l.now()
		for range 16 {
			if t = js.Next(t); t.IsZero() {
				break
			}
			if t.UnixNano()%l.quantum.Nanoseconds() != 0 {
				return fmt.Errorf("%w: the job's spec %q fires at %v, not a multiple of the Locker's quantum %v: the Locker would name two of its instants alike", ErrJobSpecMismatch, d.Crontab, t, l.quantum)
			}
		}
		return nil
	default:
		if l.spec != nil {
			return fmt.Errorf("%w: the job is a %T, not the Locker's cron spec %q: define the job with l.CronJob()", ErrJobSpecMismatch, js, l.spec.String())
		}
		return nil // daily, weekly, monthly and one-time jobs fire at fixed wall-clock times
	}
}

// zoneOf returns the zone a spec names by prefix, or def.
func zoneOf(spec, def string) string {
	s := strings.TrimSpace(spec)
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			name, _, _ := strings.Cut(rest, " ")
			return name
		}
	}
	return def
}

// Run returns the claimed occurrence (with its fencing token, Run.Token)
// of the job whose context is ctx, while it runs: a gocron task whose first
// parameter is a context.Context gets the context Lock got. ErrRunNotFound if
// that job holds no claim of l now; ErrRunAmbiguous if several of its runs
// are in progress on this scheduler.
func (l *Locker) Run(ctx context.Context) (schedule.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch cs := l.running[ctx]; len(cs) {
	case 0:
		return schedule.Run{}, ErrRunNotFound
	case 1:
		return cs[0].Run(), nil
	default:
		return schedule.Run{}, ErrRunAmbiguous
	}
}

// Lock claims the occurrence of job key that is due now. It fails (and
// gocron skips the run) if another scheduler claimed it first, or if no
// occurrence is due (a spec with no instant at or before now).
//
// It refuses (and logs once per job) a job it cannot name the occurrences
// of alike on every instance; see the package comment.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	now := l.now()
	if err := l.check(key); err != nil {
		err = fmt.Errorf("gocronlock: job %q refused: %w", key, err)
		reason := err.Error()
		for _, r := range []error{ErrLockerNotAttached, ErrJobDurationBased, ErrJobSpecMismatch} {
			if errors.Is(err, r) {
				reason = r.Error()
			}
		}
		if _, seen := l.logged.LoadOrStore(key+"\x00"+reason, true); !seen {
			l.cfg.logger.Error("gocronlock: job not run on any instance", "job", key, "namespace", l.cfg.namespace, "instance", l.instance, "err", err)
		}
		return nil, err
	}
	return l.claim(ctx, key, now)
}

// claim claims the occurrence of job key due at now.
func (l *Locker) claim(ctx context.Context, key string, now time.Time) (gocron.Lock, error) {
	at, early, err := l.occurrence(now)
	if err != nil {
		return nil, fmt.Errorf("gocronlock: job %q at %v: %w", key, now.UTC(), err)
	}
	c, err := schedule.ClaimOccurrence(ctx, l.b, "gocron/"+key, at,
		schedule.ClaimOptions{Instance: l.instance, MaxEarly: early + time.Second})
	if err != nil {
		if !errors.Is(err, backend.ErrOccurrenceClaimed) {
			l.cfg.logger.Error("gocronlock: occurrence not run here: its claim failed, so it may run nowhere", "job", key, "at", at, "namespace", l.cfg.namespace, "instance", l.instance, "err", err)
		}
		return nil, err
	}
	l.mu.Lock()
	l.running[ctx] = append(l.running[ctx], c)
	l.mu.Unlock()
	return unlocker{l, ctx, c}, nil
}

// earlyFor is E for an instant whose gap to the one before is gap.
func earlyFor(gap time.Duration) time.Duration { return min(gap/10, time.Second) }

// occurrence names the occurrence due at now and the early allowance E it
// was named with.
func (l *Locker) occurrence(now time.Time) (time.Time, time.Duration, error) {
	if l.spec == nil {
		q := l.quantum.Milliseconds()
		e := earlyFor(l.quantum)
		k := now.Add(e).UnixMilli()
		k -= ((k % q) + q) % q
		return time.UnixMilli(k).UTC(), e, nil
	}
	prev := previous(l.spec, now)
	if prev.IsZero() {
		return time.Time{}, 0, fmt.Errorf("%w: no instant of %q at or before now", leasehold.ErrInvalid, l.spec.String())
	}
	next := l.spec.Next(now)
	if !next.IsZero() {
		if e := earlyFor(next.Sub(prev)); next.Sub(now) <= e {
			return next, e, nil // the timer for next fired a little early
		}
	}
	before := previous(l.spec, prev.Add(-time.Millisecond))
	e := time.Second
	if !before.IsZero() {
		e = earlyFor(prev.Sub(before))
	}
	return prev, e, nil
}

// previous returns the latest instant of s at or before t, or the zero time
// if there is none within five years. Spec has only Next, so it looks
// back over a window that doubles until the window holds an instant.
func previous(s *schedule.Spec, t time.Time) time.Time {
	t = backend.Instant(t)
	for w := time.Second; w < 6*366*24*time.Hour; w *= 2 {
		x := s.Next(t.Add(-w))
		if x.IsZero() {
			return x // none within five years after t-w, so none by t
		}
		if x.After(t) {
			continue
		}
		for {
			n := s.Next(x)
			if n.IsZero() || n.After(t) {
				return x
			}
			x = n
		}
	}
	return time.Time{}
}

type unlocker struct {
	l   *Locker
	key context.Context
	c   *schedule.Claim
}

// unlockFinishWait bounds the write of a run's outcome in Unlock once
// gocron's context has ended (Shutdown): under gocron's default 10 s stop
// timeout, so that a ledger that does not answer does not make Shutdown
// fail with gocron.ErrStopJobsTimedOut.
const unlockFinishWait = 5 * time.Second

// Unlock records the occurrence as finished; it is never claimed again.
// The write is tried until the claim's lease deadline (Claim.Finish), and
// is not stopped by ctx: gocron unlocks a job that ran through Shutdown
// with a context Shutdown has already cancelled. Once ctx has ended it is
// tried for unlockFinishWait more at most. A run whose outcome is not
// recorded stays "running" in the ledger (runs of gocron jobs are not
// recovered by a scheduler); gocron drops Unlock's error, so it is logged.
func (u unlocker) Unlock(ctx context.Context) error {
	u.l.mu.Lock()
	cs := u.l.running[u.key]
	for i, c := range cs {
		if c == u.c {
			cs = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(u.l.running, u.key)
	} else {
		u.l.running[u.key] = cs
	}
	u.l.mu.Unlock()
	fctx, cancel := ctxgrace.Outlive(ctx, unlockFinishWait)
	defer cancel()
	err := u.c.Finish(fctx, nil)
	if err != nil {
		r := u.c.Run()
		u.l.cfg.logger.Error("gocronlock: run's outcome may not be recorded; the ledger may show the run running",
			"job", r.Job, "at", r.ScheduledAt, "token", r.Token, "namespace", u.l.cfg.namespace, "instance", u.l.instance, "err", err)
	}
	return err
}

// Elector implements gocron.Elector: IsLeader is nil while this instance
// leads the role.
type Elector struct {
	el      *leasehold.Elector
	leading atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector campaigns for role on b until Close, under this instance's
// identity (leasehold.WithInstance among opts).
func NewElector(ctx context.Context, b backend.Leases, role string, opts ...leasehold.Option) (*Elector, error) {
	e := &Elector{done: make(chan struct{})}
	el, err := leasehold.NewElector(b, role, leasehold.Callbacks{}, opts...)
	if err != nil {
		return nil, err
	}
	e.el = el
	ctx, e.cancel = context.WithCancel(ctx)
	go func() {
		defer close(e.done)
		_ = el.Run(ctx, func(lctx context.Context) error {
			e.leading.Store(true)
			<-lctx.Done()
			e.leading.Store(false)
			return nil
		})
	}()
	return e, nil
}

// IsLeader returns nil while this instance leads.
func (e *Elector) IsLeader(context.Context) error {
	if !e.leading.Load() {
		return ErrElectorNotLeader
	}
	return nil
}

// Close stops campaigning and resigns.
func (e *Elector) Close(ctx context.Context) error {
	err := e.el.Resign(ctx)
	e.cancel()
	<-e.done
	return err
}
