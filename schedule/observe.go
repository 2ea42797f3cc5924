package schedule

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// EventKind says what happened to a job's occurrence.
type EventKind uint8

// Event kinds reported to an Observer.
const (
	// EventClaim: this instance tried to claim an occurrence; Result is
	// ClaimWon, ClaimConflict (another claim came first), ClaimOverlap (the
	// job's concurrency limit) or ClaimError (gave up; the misfire policy
	// decides). CatchUp tells whether the misfire policy asked for it.
	EventClaim EventKind = iota + 1
	// EventRun: a run of a job returned on this instance; Result is
	// "succeeded" or "failed", Duration how long the job function ran.
	EventRun
	// EventRunLost: a run's claim was lost while it ran (its lease expired
	// or was taken over); another instance may run the occurrence again
	// under the crash policy.
	EventRunLost
	// EventReclaim: this instance took over an occurrence whose runner died
	// (crash policy retry); Attempt is the new attempt.
	EventReclaim
	// EventAbandon: this instance marked an occurrence whose runner died as
	// abandoned (crash policy skip, or attempts exhausted).
	EventAbandon
	// EventPrune: one retention pass ended; Count runs and expired records
	// were deleted.
	EventPrune
	// EventMisfire: Count occurrences, the latest at ScheduledAt, came due
	// (or had their claim won) later than the job's MisfireGrace — this
	// process was paused, starved, or its clock stepped forward — and the
	// misfire policy (Result) was applied: skip did not run them, run-once
	// and run-all claim them as catch-up.
	EventMisfire
	// EventRetry: this instance, which ran a failed attempt, started its
	// retry once the backoff ended (RetryPolicy); Attempt is the new
	// attempt. A retry is no crash: it is not an EventReclaim.
	EventRetry
)

var kindNames = [...]string{"", "claim", "run", "run-lost", "reclaim", "abandon", "prune", "misfire", "retry"}

// String returns the kind's name ("claim", "run", ...).
func (k EventKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Claim results reported in Event.Result.
const (
	ClaimWon      = "won"
	ClaimConflict = "conflict"
	ClaimOverlap  = "overlap"
	ClaimError    = "error"
)

// Event is one thing that happened to a job on this instance.
type Event struct {
	Kind        EventKind
	Namespace   string
	Job         string
	ScheduledAt time.Time // the occurrence (zero for EventPrune)
	Token       leasehold.Token
	Attempt     int
	Result      string
	CatchUp     bool // EventClaim: a misfired occurrence claimed by the misfire policy
	Duration    time.Duration
	Count       int   // EventPrune: runs deleted; EventMisfire: occurrences late
	Err         error // the failure, if any
}

// Observer is told about claims, runs, crash recovery and pruning, for
// metrics or logs.
//
// ObserveSchedule is called synchronously on the scheduler's goroutines,
// never while the scheduler's own lock is held. It must return quickly and
// must not block: a slow observer delays claims and heartbeats (and, for
// misfires the job timers find, every job's timer: one goroutine times all
// jobs). It must not call back into the Scheduler.
type Observer interface {
	ObserveSchedule(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// ObserveSchedule calls f(ev).
func (f ObserverFunc) ObserveSchedule(ev Event) { f(ev) }

// WithObserver sets an Observer (default: none, at no cost). If o also
// implements leasehold.Observer, the scheduler's leader election (jobs in
// Leader mode) reports to it as well. nil is none.
func WithObserver(o Observer) Option {
	return own("WithObserver", func(c *config) error { c.observer = o; return nil })
}

// emit tells the observer, if there is one, about ev.
func (s *Scheduler) emit(ev Event) {
	if o := s.cfg.observer; o != nil {
		ev.Namespace = s.cfg.namespace
		o.ObserveSchedule(ev)
	}
}

// catchUpKey marks the context of an occurrence claimed by the misfire
// policy, so that its claim event says so.
type catchUpKey struct{}

func isCatchUp(ctx context.Context) bool { return ctx.Value(catchUpKey{}) != nil }

// emitRun reports a run that returned.
func (s *Scheduler) emitRun(r Run, took time.Duration, err error) {
	if s.cfg.observer == nil {
		return
	}
	res := string(backend.Succeeded)
	if err != nil {
		res = string(backend.Failed)
	}
	s.emit(Event{Kind: EventRun, Job: r.Job, ScheduledAt: r.ScheduledAt, Token: r.Token, Attempt: r.Attempt, Result: res, Duration: took, Err: err})
}
