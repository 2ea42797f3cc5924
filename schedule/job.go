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

// Misfire says what to do with occurrences that passed while no instance
// was alive to claim them.
type Misfire string

const (
	MisfireSkip    Misfire = "skip"     // forget them (the default)
	MisfireRunOnce Misfire = "run-once" // run the latest one
	MisfireRunAll  Misfire = "run-all"  // run each, bounded by MaxCatchUp
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
}

// LeaseLost returns a channel closed when the run's lease is lost, or its
// deadline passed with no confirmed heartbeat: from then on another
// instance may run the occurrence. Unlike the run's context, which may have
// ended before for another reason (timeout, shutdown), it says when a job
// still stopping must be gone at once — a command's grace between SIGTERM
// and SIGKILL ends there. It is nil (never closed) for a run without a
// lease (mode every-instance).
func (r Run) LeaseLost() <-chan struct{} { return r.leaseLost }

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

	Timeout time.Duration // per run; 0 = none
	// Jitter delays each run by a random span up to Jitter; it never changes
	// the occurrence's instant (its key).
	Jitter time.Duration
	// MaxConcurrent limits how many occurrences of the job run at once across
	// the cluster; 1 is no-overlap: an occurrence due while the previous one
	// runs is skipped. 0 = no cluster-wide limit. Each instance also skips
	// (and logs) an occurrence while 256 of the job's occurrences are being
	// claimed or run on it, so a backend too slow for the schedule cannot
	// pile up goroutines.
	MaxConcurrent int

	Misfire       Misfire
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

// ErrDuplicateJob: Register was called with a name already registered.
var ErrDuplicateJob = errors.New("leasehold/schedule: job already registered")

// ErrUnknownJob: the named job is not registered.
var ErrUnknownJob = errors.New("leasehold/schedule: no such job")

// Validate checks j as Register would with the given history retention,
// without registering it. The error names the field and the value.
func Validate(j Job, retention time.Duration) error {
	_, _, err := j.withDefaults(retention)
	return err
}

// withDefaults fills defaults and validates; the returned error wraps
// leasehold.ErrInvalid (or ErrInvalidSpec) and names the field and value.
func (j Job) withDefaults(retention time.Duration) (Job, *Spec, error) {
	if err := leasehold.ValidatePath("job name", j.Name); err != nil {
		return j, nil, err
	}
	if strings.ContainsRune(j.Name, '!') {
		return j, nil, fmt.Errorf("%w: job name %q", leasehold.ErrInvalid, j.Name)
	}
	spec, err := Parse(j.Schedule, j.Zone)
	if err != nil {
		return j, nil, fmt.Errorf("job %q: %w", j.Name, err)
	}
	if j.Func == nil {
		return j, nil, fmt.Errorf("%w: job %q: Func is nil", leasehold.ErrInvalid, j.Name)
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
	def(&j.LeaseTTL, 30*time.Second)
	if j.MaxCatchUp == 0 {
		j.MaxCatchUp = 10
	}
	if err := j.Retry.withDefaults(); err != nil {
		return j, nil, fmt.Errorf("%w: job %q: %w", leasehold.ErrInvalid, j.Name, err)
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = max(3, 1+j.Retry.Max)
	}
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: job %q: %s %v %s", leasehold.ErrInvalid, j.Name, field, v, why)
	}
	switch {
	case j.Mode != Once && j.Mode != Leader && j.Mode != EveryInstance:
		return j, nil, bad("mode", fmt.Sprintf("%q", j.Mode), `is not "once", "leader" or "every-instance"`)
	case j.Misfire != MisfireSkip && j.Misfire != MisfireRunOnce && j.Misfire != MisfireRunAll:
		return j, nil, bad("misfire", fmt.Sprintf("%q", j.Misfire), `is not "skip", "run-once" or "run-all"`)
	case j.Crash != CrashRetry && j.Crash != CrashSkip:
		return j, nil, bad("crash", fmt.Sprintf("%q", j.Crash), `is not "retry" or "skip"`)
	case j.Timeout < 0:
		return j, nil, bad("timeout", j.Timeout, "is negative")
	case j.Jitter < 0:
		return j, nil, bad("jitter", j.Jitter, "is negative")
	case j.MaxConcurrent < 0:
		return j, nil, bad("max concurrent", j.MaxConcurrent, "is negative")
	case j.MisfireWindow < 0:
		return j, nil, bad("misfire window", j.MisfireWindow, "is negative")
	case retention > 0 && j.MisfireWindow >= retention:
		return j, nil, bad("misfire window", j.MisfireWindow, fmt.Sprintf("must be shorter than the history retention %v", retention))
	case j.MaxCatchUp < 0 || j.MaxCatchUp > 10000:
		return j, nil, bad("max catch-up", j.MaxCatchUp, "is not in 1..10000")
	case j.MaxAttempts < 1 || j.MaxAttempts > 100:
		return j, nil, bad("max attempts", j.MaxAttempts, "is not in 1..100")
	case j.Retry.Max > 0 && j.MaxAttempts < 1+j.Retry.Max:
		return j, nil, bad("max attempts", j.MaxAttempts, fmt.Sprintf("is less than 1 + retry max %d: the retries would be cut short", j.Retry.Max))
	case j.Retry.Max > 0 && j.Crash == CrashSkip:
		return j, nil, bad("retry max", j.Retry.Max, `needs crash "retry": retrying failures is at-least-once, which crash "skip" (at-most-once) rules out`)
	case j.Retry.Max > 0 && j.Mode == EveryInstance:
		return j, nil, bad("retry max", j.Retry.Max, `needs claims: mode "every-instance" has none`)
	case j.LeaseTTL < 100*time.Millisecond || j.LeaseTTL > backend.MaxTTL:
		return j, nil, bad("lease ttl", j.LeaseTTL, fmt.Sprintf("is not in 100ms..%v", backend.MaxTTL))
	}
	return j, spec, nil
}
