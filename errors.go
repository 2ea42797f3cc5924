package leasehold

import (
	"errors"

	"github.com/leasehold/leasehold/backend"
)

// Errors returned by this package, named Err<Where><What> (gocron v2's
// style). Test with errors.Is: the errors returned wrap them with the key,
// the field or the option and its value.
var (
	// ErrInvalid: bad input; nothing was changed. The message names the
	// field or the option and the value.
	ErrInvalid = backend.ErrInvalid
	// ErrLeadershipResigned is the cause of a leader's context after Resign.
	ErrLeadershipResigned = errors.New("leasehold: leadership resigned")
	// ErrLeaseLost: the lease is no longer held, or can no longer be known
	// to be held (its deadline passed without a confirmed renewal). It is
	// the cause of a lost Lock's context.
	ErrLeaseLost = backend.ErrLeaseLost
	// ErrLockNotAcquired: TryAcquire found the key held by another owner.
	ErrLockNotAcquired = errors.New("leasehold: lock not acquired")
	// ErrLockReleased is the cause of a Lock's context after Release.
	ErrLockReleased = errors.New("leasehold: lock released")
	// ErrNoLeader: Leader found nobody holding the role.
	ErrNoLeader = errors.New("leasehold: no leader")
	// ErrOutcomeIndeterminate: the outcome of a request cannot be known (it
	// timed out and may or may not have been applied). Never a guess.
	ErrOutcomeIndeterminate = errors.New("leasehold: outcome indeterminate")
	// ErrRefused: the backend's server refused the request for want of
	// permission (a Redis ACL, say); nothing was granted. Not
	// ErrOutcomeIndeterminate unless an earlier attempt's outcome was
	// unknown.
	ErrRefused = backend.ErrRefused
)

// Former names, kept so that existing callers and their errors.Is tests go
// on working: each is the same error value as its new name.
var (
	// ErrNotAcquired is ErrLockNotAcquired.
	//
	// Deprecated: use ErrLockNotAcquired.
	ErrNotAcquired = ErrLockNotAcquired
	// ErrReleased is ErrLockReleased.
	//
	// Deprecated: use ErrLockReleased.
	ErrReleased = ErrLockReleased
	// ErrResigned is ErrLeadershipResigned.
	//
	// Deprecated: use ErrLeadershipResigned.
	ErrResigned = ErrLeadershipResigned
	// ErrIndeterminate is ErrOutcomeIndeterminate.
	//
	// Deprecated: use ErrOutcomeIndeterminate.
	ErrIndeterminate = ErrOutcomeIndeterminate
)
