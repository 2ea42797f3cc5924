package sqlledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The rules of the ledger, as every SQL backend judges them. A claim is
// judged in this order: the occurrence's record (Existing), MaxEarly
// (TooEarly), MaxLate (TooLate), MaxRunning (Overlap). How each database
// makes that order atomic differs (see each backend's Claim); the verdicts
// and their messages are these.

// occurrence names an occurrence in messages.
var occurrence = backend.FormatOccurrence

// Existing judges a claim of an occurrence that has a record: renew is
// true for a retry by its running owner (the caller renews the lease and
// answers with the record's token); else the error is a
// *backend.ClaimedError carrying the record.
func Existing(req backend.ClaimRequest, r backend.Run) (renew bool, err error) {
	if r.Owner == req.Owner && r.State == backend.Running {
		return true, nil
	}
	return false, &backend.ClaimedError{Run: r}
}

// Window judges MaxEarly and then MaxLate against the backend's clock now,
// for a backend that judges them in Go.
func Window(req backend.ClaimRequest, at, now time.Time) error {
	if at.After(now.Add(req.MaxEarly)) {
		return TooEarly(req, at, now)
	}
	if req.MaxLate > 0 && at.Before(now.Add(-req.MaxLate)) {
		return TooLate(req, at, now)
	}
	return nil
}

// Late reports whether MaxLate bounds the claim and at is earlier than now
// minus MaxLate: TooLate's condition, for a backend that judges it in Go.
func Late(req backend.ClaimRequest, at, now time.Time) bool {
	return req.MaxLate > 0 && at.Before(now.Add(-req.MaxLate))
}

// TooEarly is the refusal of a claim of an occurrence in the future beyond
// MaxEarly by the backend's clock now.
func TooEarly(req backend.ClaimRequest, at, now time.Time) error {
	return fmt.Errorf("%w: %s, backend clock %s, max early %v",
		backend.ErrOccurrenceTooEarly, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxEarly)
}

// TooLate is the refusal of a claim of an occurrence older than MaxLate by
// the backend's clock now: a misfire.
func TooLate(req backend.ClaimRequest, at, now time.Time) error {
	return fmt.Errorf("%w: %s, backend clock %s, max late %v",
		backend.ErrOccurrenceTooLate, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxLate)
}

// Overlap is the refusal of a claim while the job has running (≥
// MaxRunning) occurrences under live leases.
func Overlap(req backend.ClaimRequest, running int) error {
	return fmt.Errorf("%w: job %q has %d running, max %d", backend.ErrOccurrenceOverlap, req.Job, running, req.MaxRunning)
}

// OverlapOther is Reclaim's Overlap: the job's other occurrences under
// live leases.
func OverlapOther(req backend.ClaimRequest, at time.Time, running int) error {
	return fmt.Errorf("%w: %s: the job has %d other running, max %d",
		backend.ErrOccurrenceOverlap, occurrence(req.Job, at), running, req.MaxRunning)
}

// NeverClaimed is the answer of Reclaim and Abandon for an occurrence
// without a record.
func NeverClaimed(job string, at time.Time) error {
	return fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(job, at))
}

// NotExpired is the answer of Reclaim and Abandon while the runner's lease
// is live.
func NotExpired(job string, at time.Time, r backend.Run) error {
	return fmt.Errorf("%w: %s held by %s", backend.ErrLeaseNotExpired, occurrence(job, at), r.Owner.Instance)
}

// Reclaim judges a Reclaim of the occurrence whose record is r, read under
// the row's lock; live says whether the runner's lease is unexpired by the
// backend's clock. In order: a retry by its running owner is renewed
// (renew true: the caller renews and answers with r's token); a finished
// occurrence is a *backend.ClaimedError; a live lease is NotExpired; an
// occurrence that ran MaxAttempts attempts is exhausted (judged under the
// row's lock). A nil error and renew false: take it over (MaxRunning is
// the caller's to count, under the job's lock).
func Reclaim(req backend.ClaimRequest, at time.Time, r backend.Run, live bool) (renew bool, err error) {
	switch {
	case r.State == backend.Running && r.Owner == req.Owner:
		return true, nil
	case r.State.Finished():
		return false, &backend.ClaimedError{Run: r}
	case live:
		return false, NotExpired(req.Job, at, r)
	case req.MaxAttempts > 0 && r.Attempt >= req.MaxAttempts:
		return false, fmt.Errorf("%w: %s ran %d attempts, max %d",
			backend.ErrOccurrenceExhausted, occurrence(req.Job, at), r.Attempt, req.MaxAttempts)
	}
	return false, nil
}

// Abandon judges an Abandon of the occurrence whose record is r and which
// was not (or is not to be) abandoned: a finished occurrence is a
// *backend.ClaimedError, one with a live lease NotExpired. live false and
// a running r: nil (it may be abandoned).
func Abandon(job string, at time.Time, r backend.Run, live bool) error {
	switch {
	case r.State.Finished():
		return &backend.ClaimedError{Run: r}
	case live:
		return NotExpired(job, at, r)
	}
	return nil
}

// Verdict reports whether err is one of the ledger's answers above (a
// refusal judged by the rules) rather than a failure of the database: a
// verdict is returned as it is, a failure wrapped by Dialect.Err.
func Verdict(err error) bool {
	var ce *backend.ClaimedError
	return errors.As(err, &ce) ||
		errors.Is(err, backend.ErrNotFound) ||
		errors.Is(err, backend.ErrLeaseNotExpired) ||
		errors.Is(err, backend.ErrOccurrenceExhausted) ||
		errors.Is(err, backend.ErrOccurrenceOverlap) ||
		errors.Is(err, backend.ErrOccurrenceTooEarly) ||
		errors.Is(err, backend.ErrOccurrenceTooLate)
}
