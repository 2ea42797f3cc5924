package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// Mode says who runs a job's occurrences.
type Mode string

const (
	// Once: every instance computes the occurrences; each is claimed in the
	// ledger and run by exactly one instance (the default).
	Once Mode = "once"
	// Leader: only the elected scheduler leader claims and runs occurrences
	// (still per-occurrence claims, so a leader change cannot run one twice).
	Leader Mode = "leader"
	// EveryInstance: plain local cron; every instance runs every occurrence,
	// with no claims (Run.Token is 0).
	EveryInstance Mode = "every-instance"
)

// Misfire says what to do with occurrences that were not claimed on time:
// they passed while no instance was alive, or this instance's timer fired
// more than Job.MisfireGrace late (the process was paused, its wall clock
// stepped forward, it was starved of CPU), or its claim was won that late.
type Misfire string

const (
	MisfireSkip    Misfire = "skip"     // forget them (the default)
	MisfireRunOnce Misfire = "run-once" // run the latest one, late
	MisfireRunAll  Misfire = "run-all"  // run each, late, one after another, at most MaxCatchUp
)

// Crash says what happens to an occurrence whose runner died (its lease
// expired before it finished).
type Crash string

const (
	// CrashRetry: another instance reclaims it with a greater token and
	// attempt+1, up to MaxAttempts: execution is at-least-once.
	CrashRetry Crash = "retry"
	// CrashSkip: it is marked abandoned and never run again: execution is
	// at-most-once.
	CrashSkip Crash = "skip"
)

// Run describes one execution of an occurrence, as handed to the job.
type Run struct {
	Job         string
	ScheduledAt time.Time // the occurrence's instant: UTC, milliseconds; the same on every instance
	Attempt     int       // 1, or more after a crash under CrashRetry or a failure under Retry
	// Token is the fencing token of this claim: greater than every token of
	// earlier claims of the job. A sink that rejects lower tokens keeps a
	// stale runner's late write out; effects are exactly-once only through
	// a sink that is also idempotent by Job+ScheduledAt (a retry after a
	// crash writes again with a greater token).
	Token    leasehold.Token
	Instance string

	result    *string       // set by Report, recorded by the scheduler
	leaseLost chan struct{} // closed when the run's lease is lost; nil without a lease
	lease     *runLease     // the run's lease deadline; nil without a lease
}

// LeaseLost returns a channel closed when the run's lease is lost, or its
// deadline passed with no confirmed heartbeat: from then on another
// instance may run the occurrence. Unlike the run's context, which may have
// ended before for another reason (timeout, shutdown), it says when a job
// still stopping must be gone at once — a command's grace between SIGTERM
// and SIGKILL ends there. It is nil (never closed) for a run without a
// lease (mode every-instance).
func (r Run) LeaseLost() <-chan struct{} { return r.leaseLost }

// LeaseDeadline returns the run's lease deadline as last confirmed — the
// send time of the last confirmed claim or heartbeat + TTL × (1 − drift) −
// margin, on the local monotonic clock: the run's context is cancelled
// there unless a heartbeat moves it — and a channel closed when a
// confirmed heartbeat next moves it. A job that hands its work to another
// process (a command's supervisor) passes the deadline on each time, so
// that the work is stopped there even if this process is paused. A run
// without a lease (mode every-instance) returns the zero time and nil.
func (r Run) LeaseDeadline() (time.Time, <-chan struct{}) {
	if r.lease == nil {
		return time.Time{}, nil
	}
	return r.lease.get()
}

// Report sets a short text result for this run (command output, a response
// status...) that the scheduler records in the run history with the outcome.
// It is truncated to backend.MaxResultLen.
func (r Run) Report(result string) {
	if r.result != nil {
		*r.result = result
	}
}

// Func is a job's body. ctx is cancelled on timeout, on shutdown after the
// grace period, and when the claim's lease is lost.
type Func func(ctx context.Context, run Run) error

// Job is a scheduled job. Only Name, Schedule and Func are required.
type Job struct {
	Name     string
	Schedule string // "30 2 * * *", "*/10 * * * * *", "@daily", "@every 5m", "CRON_TZ=Europe/Paris 0 9 * * 1-5"
	Zone     string // IANA zone for cron specs; "" = UTC
	Func     Func
	Mode     Mode
	// Revision is part of the schedule version (0 = none). Versions only
	// move forward: a spec that was replaced is refused if it comes back
	// (an instance restarted with an old config). To return to an earlier
	// schedule on purpose, give it a revision never used before.
	Revision int
	// StartPaused makes the job start paused: until Resume is called (on
	// any instance of the namespace) it is paused as if Pause had been
	// called. The paused state recorded in the backend, once there is one,
	// rules: a job resumed once stays resumed across restarts.
	StartPaused bool

	Timeout time.Duration // per run; 0 = none
	// Jitter delays each run by a random span up to Jitter; it never changes
	// the occurrence's instant (its key).
	Jitter time.Duration
	// MaxConcurrent limits how many runs of the job (scheduled, reclaimed
	// after a crash, or triggered) hold unexpired leases at once across the
	// cluster; 1 is no-overlap: an occurrence due while the previous one runs
	// is skipped, a crashed one is reclaimed only once the others ended, and
	// Trigger is refused with backend.ErrOverlap. 0 = no cluster-wide limit. Each instance also skips
	// (and logs) an occurrence while 256 of the job's occurrences are being
	// claimed or run on it, so a backend too slow for the schedule cannot
	// pile up goroutines.
	MaxConcurrent int

	Misfire Misfire
	// MisfireGrace is how late an occurrence may start and still count as
	// on time (default 5 s, or MisfireWindow if shorter): one whose timer
	// fired, or whose claim was won, later than that after its instant is
	// a misfire, handled by Misfire like an occurrence that passed while no
	// instance ran. Instants that came due together (after a pause shorter
	// than the grace) but are each within it all start: use MaxConcurrent 1
	// to keep them from overlapping, or a grace shorter than the period.
	// Jitter is not counted as lateness.
	MisfireGrace  time.Duration
	MisfireWindow time.Duration // how far back catch-up looks (default 1 h)
	MaxCatchUp    int           // run-all: at most this many (default 10)

	Crash Crash
	// MaxAttempts bounds the attempts of one occurrence, whatever ended
	// the earlier ones — a crash or, under Retry, a failure (default 3, or
	// 1+Retry.Max if that is more; it may not be less).
	MaxAttempts int
	// Retry retries failed runs (the job returned an error, panicked or
	// timed out), not only crashed ones. Zero: a failure is final.
	Retry    RetryPolicy
	LeaseTTL time.Duration // the runner's lease on a claim (default 30 s); heartbeats renew it

	// OnLost is called when a run's lease is lost while it runs (its context
	// is cancelled): the place for compensation.
	OnLost func(Run)
}

// FieldError is one invalid field of a Job. Validate and Register return
// one FieldError, or several joined (errors.Join), naming every invalid
// field; Err wraps leasehold.ErrInvalid or ErrInvalidSpec and names the
// job, the field and the value.
type FieldError struct {
	Field string // the Job field: "Name", "Schedule", "Zone", "Timeout", "MisfireWindow", ...
	Err   error
}

// Error returns Err's message.
func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks j as Register would with the given history retention,
// without registering it. The error names every invalid field and its
// value: a *FieldError, or several joined.
func Validate(j Job, retention time.Duration) error {
	_, _, err := j.withDefaults(retention)
	return err
}

// withDefaults fills defaults and validates; the returned error wraps
// leasehold.ErrInvalid (or ErrInvalidSpec) and is a *FieldError per
// invalid field, joined.
func (j Job) withDefaults(retention time.Duration) (Job, *Spec, error) {
	var errs []error
	field := func(name string, err error) { errs = append(errs, &FieldError{Field: name, Err: err}) }
	if err := leasehold.ValidatePath("job name", j.Name); err != nil {
		field("Name", err)
	} else if strings.ContainsRune(j.Name, '!') {
		field("Name", fmt.Errorf("%w: job name %q", leasehold.ErrInvalid, j.Name))
	}
	specZone := j.Zone
	if j.Zone != "" {
		if _, err := loadZone(j.Zone); err != nil {
			field("Zone", fmt.Errorf("job %q: %w: %v", j.Name, ErrSpecInvalid, err))
			specZone = "" // still check the schedule itself
		}
	}
	spec, err := Parse(j.Schedule, specZone)
	if err != nil {
		field("Schedule", fmt.Errorf("job %q: %w", j.Name, err))
	}
	if j.Revision < 0 || j.Revision > 1_000_000 {
		field("Revision", fmt.Errorf("%w: job %q: revision %d is not in 0..1000000", leasehold.ErrInvalid, j.Name, j.Revision))
	} else if spec != nil {
		spec = spec.WithRevision(j.Revision)
	}
	if j.Func == nil {
		field("Func", fmt.Errorf("%w: job %q: Func is nil", leasehold.ErrInvalid, j.Name))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if j.Mode == "" {
		j.Mode = Once
	}
	if j.Misfire == "" {
		j.Misfire = MisfireSkip
	}
	if j.Crash == "" {
		j.Crash = CrashRetry
	}
	def(&j.MisfireWindow, time.Hour)
	def(&j.MisfireGrace, min(5*time.Second, j.MisfireWindow))
	def(&j.LeaseTTL, 30*time.Second)
	if j.MaxCatchUp == 0 {
		j.MaxCatchUp = 10
	}
	if name, err := j.Retry.withDefaults(); err != nil {
		field(name, fmt.Errorf("%w: job %q: %w", leasehold.ErrInvalid, j.Name, err))
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = max(3, 1+j.Retry.Max)
	}
	bad := func(name, what string, v any, why string) {
		field(name, fmt.Errorf("%w: job %q: %s %v %s", leasehold.ErrInvalid, j.Name, what, v, why))
	}
	if j.Mode != Once && j.Mode != Leader && j.Mode != EveryInstance {
		bad("Mode", "mode", fmt.Sprintf("%q", j.Mode), `is not "once", "leader" or "every-instance"`)
	}
	if j.Misfire != MisfireSkip && j.Misfire != MisfireRunOnce && j.Misfire != MisfireRunAll {
		bad("Misfire", "misfire", fmt.Sprintf("%q", j.Misfire), `is not "skip", "run-once" or "run-all"`)
	}
	if j.Crash != CrashRetry && j.Crash != CrashSkip {
		bad("Crash", "crash", fmt.Sprintf("%q", j.Crash), `is not "retry" or "skip"`)
	}
	if j.Timeout < 0 {
		bad("Timeout", "timeout", j.Timeout, "is negative")
	}
	if j.Jitter < 0 {
		bad("Jitter", "jitter", j.Jitter, "is negative")
	}
	if j.MaxConcurrent < 0 {
		bad("MaxConcurrent", "max concurrent", j.MaxConcurrent, "is negative")
	}
	switch {
	case j.MisfireWindow < 0:
		bad("MisfireWindow", "misfire window", j.MisfireWindow, "is negative")
	case j.MisfireGrace < 0:
		bad("MisfireGrace", "misfire grace", j.MisfireGrace, "is negative")
	case j.MisfireGrace > j.MisfireWindow:
		bad("MisfireGrace", "misfire grace", j.MisfireGrace, fmt.Sprintf("is longer than the misfire window %v", j.MisfireWindow))
	case retention > 0 && j.MisfireWindow >= retention:
		bad("MisfireWindow", "misfire window", j.MisfireWindow, fmt.Sprintf("must be shorter than the history retention %v", retention))
	}
	if j.MaxCatchUp < 0 || j.MaxCatchUp > 10000 {
		bad("MaxCatchUp", "max catch-up", j.MaxCatchUp, "is not in 1..10000")
	}
	if j.MaxAttempts < 1 || j.MaxAttempts > 100 {
		bad("MaxAttempts", "max attempts", j.MaxAttempts, "is not in 1..100")
	}
	if j.Retry.Max > 0 && j.MaxAttempts < 1+j.Retry.Max {
		bad("MaxAttempts", "max attempts", j.MaxAttempts, fmt.Sprintf("is less than 1 + retry max %d: the retries would be cut short", j.Retry.Max))
	}
	if j.Retry.Max > 0 && j.Crash == CrashSkip {
		bad("Retry.Max", "retry max", j.Retry.Max, `needs crash "retry": retrying failures is at-least-once, which crash "skip" (at-most-once) rules out`)
	}
	if j.Retry.Max > 0 && j.Mode == EveryInstance {
		bad("Retry.Max", "retry max", j.Retry.Max, `needs claims: mode "every-instance" has none`)
	}
	if j.LeaseTTL < 100*time.Millisecond || j.LeaseTTL > backend.MaxTTL {
		bad("LeaseTTL", "lease ttl", j.LeaseTTL, fmt.Sprintf("is not in 100ms..%v", backend.MaxTTL))
	}
	if len(errs) > 0 {
		return j, nil, errors.Join(errs...)
	}
	return j, spec, nil
}
