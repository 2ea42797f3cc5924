package schedule

import "errors"

// Errors returned by this package, named Err<Where><What> (gocron v2's
// style). Test with errors.Is. Invalid options and jobs wrap
// leasehold.ErrInvalid (a job's invalid field is a *FieldError).
var (
	// ErrJobAlreadyRegistered: Register was called with a name already
	// registered.
	ErrJobAlreadyRegistered = errors.New("leasehold/schedule: job already registered")
	// ErrJobNotFound: the named job is not registered.
	ErrJobNotFound = errors.New("leasehold/schedule: no such job")
	// ErrJobPaused: Trigger was refused because the job is paused (see
	// Pause); nothing was run or recorded.
	ErrJobPaused = errors.New("leasehold/schedule: job is paused")
	// ErrJobTimeout is the cause of a run's context when the job's Timeout
	// passed (wrapped with the timeout: "job timed out after 30s"). A run
	// that returns an error after it is recorded as failed with an error
	// that wraps it; a run that returns nil after it did its work, late, and
	// is recorded as succeeded.
	ErrJobTimeout = errors.New("leasehold/schedule: job timed out")
	// ErrSchedulerShutdown is the cause of a running job's context when
	// Shutdown's grace period ran out.
	ErrSchedulerShutdown = errors.New("leasehold/schedule: shut down")
	// ErrSpecInvalid: a schedule spec or time zone could not be parsed.
	ErrSpecInvalid = errors.New("leasehold/schedule: invalid schedule")
	// ErrTriggerKeySpent: a trigger was refused (nothing ran), but the
	// refusal could not be recorded before the caller's context ended (and
	// 3 s more), so its idempotency key counts, or may count, as used: a
	// retry with it is refused as claimed. Trigger again with another key.
	ErrTriggerKeySpent = errors.New("leasehold/schedule: trigger refused, and its key could not be freed")
	// ErrOnceFailed wraps the error of a RunOnce function that ran here and
	// failed. The failure is recorded, and the key is not run again (until
	// its run is pruned): a failure counts as the key's one run.
	ErrOnceFailed = errors.New("leasehold/schedule: the once function failed")
	// ErrOnceAbandoned: the key's run had been claimed, but its runner's
	// lease expired before it recorded an outcome (it died, or a claim
	// whose answer was lost left the key held): RunOnce recorded the run as
	// abandoned and did not run fn. Whatever the first runner did may have
	// happened: treat it as "maybe done" (dead-letter, alert, check the
	// effect).
	ErrOnceAbandoned = errors.New("leasehold/schedule: the once key's earlier run was abandoned (maybe done)")
)

// Former names, kept so that existing callers and their errors.Is tests go
// on working: each is the same error value as its new name.
var (
	// ErrDuplicateJob is ErrJobAlreadyRegistered.
	//
	// Deprecated: use ErrJobAlreadyRegistered.
	ErrDuplicateJob = ErrJobAlreadyRegistered
	// ErrUnknownJob is ErrJobNotFound.
	//
	// Deprecated: use ErrJobNotFound.
	ErrUnknownJob = ErrJobNotFound
	// ErrPaused is ErrJobPaused.
	//
	// Deprecated: use ErrJobPaused.
	ErrPaused = ErrJobPaused
	// ErrTimeout is ErrJobTimeout.
	//
	// Deprecated: use ErrJobTimeout.
	ErrTimeout = ErrJobTimeout
	// ErrShutdown is ErrSchedulerShutdown.
	//
	// Deprecated: use ErrSchedulerShutdown.
	ErrShutdown = ErrSchedulerShutdown
	// ErrInvalidSpec is ErrSpecInvalid.
	//
	// Deprecated: use ErrSpecInvalid.
	ErrInvalidSpec = ErrSpecInvalid
)
