package gocronlock

import "errors"

// The package's errors, each named Err<Where><What>; match them with
// errors.Is. Errors of a backend or of leasehold itself come wrapped as
// they are.
var (
	// ErrJobDurationBased refuses a job whose instants count from each
	// scheduler's start (gocron.DurationJob, DurationRandomJob, "@every"):
	// instances would name one occurrence differently and run it twice.
	ErrJobDurationBased = errors.New("leasehold/gocronlock: the job's instants count from each scheduler's start (DurationJob, DurationRandomJob or @every), so instances cannot agree on an occurrence: use a cron spec")
	// ErrJobSpecMismatch refuses a job whose cron spec differs from the
	// Locker's (NewJobLocker), or whose instants are not multiples of the
	// Locker's quantum (NewLocker).
	ErrJobSpecMismatch = errors.New("leasehold/gocronlock: the job's schedule does not match the Locker's")
	// ErrLockerNotAttached refuses a Lock before Attach (or NewScheduler):
	// the Locker cannot see the job's definition.
	ErrLockerNotAttached = errors.New("leasehold/gocronlock: no scheduler attached to the Locker (call Attach, or create the scheduler with gocronlock.NewScheduler)")
	// ErrRunNotFound is returned by Run for a context of no job running
	// under a claim of this Locker.
	ErrRunNotFound = errors.New("leasehold/gocronlock: no claimed run for this context")
	// ErrRunAmbiguous is returned by Run when several runs of the job are
	// in progress on this scheduler (use gocron.WithSingletonMode).
	ErrRunAmbiguous = errors.New("leasehold/gocronlock: several runs of the job are in progress here; use gocron.WithSingletonMode to get each run's token")
	// ErrElectorNotLeader is returned by IsLeader on a follower.
	ErrElectorNotLeader = errors.New("leasehold/gocronlock: not the leader")
)

// The names these errors had before; each is the same value as its new
// name, so errors.Is matches either.
var (
	// Deprecated: use ErrJobDurationBased.
	ErrDurationJob = ErrJobDurationBased
	// Deprecated: use ErrJobSpecMismatch.
	ErrSpecMismatch = ErrJobSpecMismatch
	// Deprecated: use ErrLockerNotAttached.
	ErrNotAttached = ErrLockerNotAttached
	// Deprecated: use ErrRunNotFound.
	ErrNoRun = ErrRunNotFound
	// Deprecated: use ErrRunAmbiguous.
	ErrAmbiguousRun = ErrRunAmbiguous
	// Deprecated: use ErrElectorNotLeader.
	ErrNotLeader = ErrElectorNotLeader
)
