package backend

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors, named Err<Where><What> (gocron v2's style). Backends wrap
// them with %w; callers test with errors.Is. The request-level ones
// (ErrClosed, ErrInvalid, ErrNotApplied, ErrNotFound, ErrRefused) keep their
// short names: they say what became of the request, whatever it was about.
var (
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("leasehold/backend: closed")
	// ErrSchemaTooNew: a backend's stored schema (tables, database file)
	// was written by a newer leasehold whose schema this code does not
	// know; nothing was changed. The SQL backends' ErrSchemaTooNew is it.
	ErrSchemaTooNew = errors.New("leasehold/backend: stored schema is newer than this code")
	// ErrInvalid: the request was malformed; nothing was changed.
	ErrInvalid = errors.New("leasehold/backend: invalid argument")
	// ErrLeaseHeld: the key is held by another owner (Acquire). The error is
	// a *HeldError carrying the current holder.
	ErrLeaseHeld = errors.New("leasehold/backend: held by another owner")
	// ErrLeaseLost: the caller's owner nonce and token no longer hold the
	// lease or claim (it expired, was taken over, or was released).
	ErrLeaseLost = errors.New("leasehold/backend: lease lost")
	// ErrLeaseNotExpired: Reclaim or Abandon was asked for an occurrence
	// whose runner still holds an unexpired lease.
	ErrLeaseNotExpired = errors.New("leasehold/backend: runner's lease has not expired")
	// ErrNoLedger: the backend implements Leases but not Ledger, so it
	// cannot keep the scheduler's run ledger.
	ErrNoLedger = errors.New("leasehold/backend: the backend keeps no run ledger")
	// ErrNotApplied: nothing of the request remains: it was never sent (its
	// context ended while it waited for a connection), or what it did was
	// undone and the undoing confirmed (a queued acquire that left its
	// queue). Unlike a timeout after sending, it leaves no outcome to find
	// out.
	ErrNotApplied = errors.New("leasehold/backend: request not sent")
	// ErrNotFound: no lease or claim exists for the key (Get).
	ErrNotFound = errors.New("leasehold/backend: not found")
	// ErrOccurrenceClaimed: the occurrence is already claimed. The error is
	// a *ClaimedError carrying the current record.
	ErrOccurrenceClaimed = errors.New("leasehold/backend: occurrence already claimed")
	// ErrOccurrenceExhausted: Reclaim was asked to take over an occurrence
	// that already ran ClaimRequest.MaxAttempts attempts; nothing was
	// changed. The caller abandons it (Abandon) rather than run it again.
	ErrOccurrenceExhausted = errors.New("leasehold/backend: occurrence has used all its attempts")
	// ErrOccurrenceOverlap: a claim would exceed the job's cluster-wide
	// limit of concurrently running occurrences.
	ErrOccurrenceOverlap = errors.New("leasehold/backend: too many running occurrences")
	// ErrOccurrenceTooEarly: a claim was made while the backend's clock says
	// the occurrence is still in the future beyond the allowed tolerance.
	ErrOccurrenceTooEarly = errors.New("leasehold/backend: occurrence is in the future")
	// ErrOccurrenceTooLate: a claim was made while the backend's clock says
	// the occurrence is older than the claim's MaxLate: it is a misfire, for
	// the job's misfire policy, not a claim by a process that woke late.
	ErrOccurrenceTooLate = errors.New("leasehold/backend: occurrence is too late to claim (a misfire)")
	// ErrRefused: the server refused the request for want of permission
	// (an ACL, a missing grant, a failed authentication). Retrying gets the
	// same answer until the server's configuration changes, so callers
	// give up at once. When the refusal came before anything of the
	// request ran, the error matches ErrNotApplied too (nothing to find
	// out); else part of it may have run (see Refused).
	ErrRefused = errors.New("leasehold/backend: refused by the server")
)

// Former names, kept so that existing callers and their errors.Is tests go
// on working: each is the same error value as its new name.
var (
	// ErrHeld is ErrLeaseHeld.
	//
	// Deprecated: use ErrLeaseHeld.
	ErrHeld = ErrLeaseHeld
	// ErrNotExpired is ErrLeaseNotExpired.
	//
	// Deprecated: use ErrLeaseNotExpired.
	ErrNotExpired = ErrLeaseNotExpired
	// ErrClaimed is ErrOccurrenceClaimed.
	//
	// Deprecated: use ErrOccurrenceClaimed.
	ErrClaimed = ErrOccurrenceClaimed
	// ErrExhausted is ErrOccurrenceExhausted.
	//
	// Deprecated: use ErrOccurrenceExhausted.
	ErrExhausted = ErrOccurrenceExhausted
	// ErrOverlap is ErrOccurrenceOverlap.
	//
	// Deprecated: use ErrOccurrenceOverlap.
	ErrOverlap = ErrOccurrenceOverlap
	// ErrTooEarly is ErrOccurrenceTooEarly.
	//
	// Deprecated: use ErrOccurrenceTooEarly.
	ErrTooEarly = ErrOccurrenceTooEarly
	// ErrTooLate is ErrOccurrenceTooLate.
	//
	// Deprecated: use ErrOccurrenceTooLate.
	ErrTooLate = ErrOccurrenceTooLate
)

// ContextEnded returns the error of a request that was sent and whose
// reply did not come before ctx ended: its outcome is unknown. It matches
// ctx.Err() (context.Canceled or context.DeadlineExceeded) and quotes
// ctx's cause without matching it. The cause is why the caller stopped
// waiting — a Locker ends a renewal's context with ErrLeaseLost once it can
// no longer prove the lease in time — never the server's answer: wrapping
// it would make an unknown outcome read as a definite one (the chaos
// checker caught a Renew reported "lost" for a lease its owner then
// released). Call it once ctx has ended.
func ContextEnded(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		err = context.Canceled // misuse: ctx has not ended; still not a definite answer
	}
	if c := context.Cause(ctx); c != nil && c != err {
		return fmt.Errorf("%w (the caller's cause: %v)", err, c)
	}
	return err
}

// NotSent returns the error of a request that was never sent because ctx
// ended first: it matches ErrNotApplied and ctx.Err(), and quotes ctx's
// cause without matching it, as ContextEnded does (a Lock.Release whose
// context a lost lock had ended read the cause, ErrLeaseLost, as "already
// released" and left the lease held).
func NotSent(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		err = context.Canceled // misuse: ctx has not ended
	}
	if c := context.Cause(ctx); c != nil && c != err {
		return fmt.Errorf("%w: %w (the caller's cause: %v)", ErrNotApplied, err, c)
	}
	return fmt.Errorf("%w: %w", ErrNotApplied, err)
}
