package cronwrap

import "errors"

// The package's errors, each named Err<Where><What>; match them with
// errors.Is.
var (
	// ErrRunNoInstant is what an occurrence fails with when the cron entry
	// has no instant it fired for (the job was run by hand, or its entry
	// was removed).
	ErrRunNoInstant = errors.New("leasehold/cronwrap: no scheduled instant for this run")
	// ErrSpecEvery is returned by Add for a robfig "@every" spec, whose
	// instants differ on every instance.
	ErrSpecEvery = errors.New("leasehold/cronwrap: @every counts from each process's start, so instances share no instants")
)

// The names these errors had before; each is the same value as its new
// name, so errors.Is matches either.
var (
	// Deprecated: use ErrRunNoInstant.
	ErrNoInstant = ErrRunNoInstant
	// Deprecated: use ErrSpecEvery.
	ErrEvery = ErrSpecEvery
)
