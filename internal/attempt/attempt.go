// Package attempt sends a request whose outcome may be unknown — an
// acquire, a claim, a reclaim — in attempts under one nonce, and decides
// what its answers prove. It is the one place that keeps these rules
// (docs/semantics.md; README "What is guaranteed", item 3):
//
//   - A retry reuses the request's nonce, so a retry of an attempt that was
//     applied answers "yours" (and renews the lease) instead of leaving an
//     orphaned grant.
//   - An attempt whose outcome is unknown (a timeout, a broken connection)
//     may be applied later, even after a later attempt was refused: the
//     send time of the earliest such attempt is kept for the whole run.
//   - A grant that may answer such an attempt, or whose reply arrived after
//     the deadline its own send time gives, is confirmed by a renewal before
//     it is returned: the holder's deadline then counts from the renewal's
//     send time, or else from the earliest attempt that may have been
//     applied — the backend cannot have started the lease before it.
//   - Only an answer proves an attempt was not applied: a request never
//     sent (backend.ErrNotApplied) or a refusal. A run that gives up while
//     an attempt may have been applied ends Indeterminate, never with a
//     guess, and starts the caller's release of the grant that may be left.
//
// The package knows no backend: its caller says what an error means
// (Verdict), how to wait between attempts and when to give up (Retry), and
// how to renew and release.
package attempt

import (
	"context"
	"errors"
	"time"
)

// Verdict is what a failed attempt's error says about the attempt.
type Verdict int

const (
	// Unknown: the attempt may have been applied, now or later (a timeout,
	// a broken connection). Retry decides whether to try again.
	Unknown Verdict = iota
	// NotApplied: the attempt was not applied, and another may succeed (a
	// request never sent, a claim too early, a key held while the caller
	// waits for it). Retry decides whether to try again.
	NotApplied
	// Refused: an answer that ends the run. The attempt was not applied; an
	// earlier attempt whose outcome was unknown may still be.
	Refused
	// Settled: an answer that ends the run and proves that no attempt was
	// or will be applied (an occurrence claimed by another owner: a retry of
	// an applied attempt would have answered "yours").
	Settled
	// Unconfirmed is the verdict Retry is given for a grant that could not
	// be confirmed while it could still be trusted (see Failure.Gone). A
	// Judge never returns it.
	Unconfirmed
)

// ErrUnconfirmed is the error of a Failure whose verdict is Unconfirmed: a
// grant could not be confirmed before its deadline.
var ErrUnconfirmed = errors.New("the grant could not be confirmed before its deadline")

// Request is one request, sent in attempts under one nonce by Run. G is
// what a successful attempt returns (a grant, with whatever else the
// caller needs).
type Request[G any] struct {
	// Try sends one attempt and returns what it won and the TTL it was
	// granted for.
	Try func(ctx context.Context) (G, time.Duration, error)
	// Judge says what a failed attempt's error means.
	Judge func(err error) Verdict
	// Span is how long after a send time a lease granted for ttl may be
	// trusted: ttl × (1 − drift) − margin.
	Span func(ttl time.Duration) time.Duration
	// Confirm renews a grant (a renewal or heartbeat, bounded by its own
	// timeout: a renewal that succeeds proves the lease was live when it
	// arrived, however long ago the run began) and returns the TTL it
	// granted.
	Confirm func(ctx context.Context, g G, ttl time.Duration) (time.Duration, error)
	// IsLost tells a Confirm error that says the grant is no longer held.
	IsLost func(err error) bool
	// Retry is called after each attempt that won nothing, unless its
	// verdict ended the run (Refused, Settled). It waits before the next
	// attempt and returns nil, or returns the error to give up with.
	Retry func(ctx context.Context, f Failure) error
	// Release, if not nil, is started in a goroutine when the run gives up
	// while a grant of one of its attempts may exist: it looks for that
	// grant and releases it, bounded by its own timeout.
	Release func()
}

// Failure is an attempt that won nothing, as Retry is told it.
type Failure struct {
	Err     error   // the attempt's error, or ErrUnconfirmed
	Verdict Verdict // Judge's verdict on Err, or Unconfirmed
	// Gone: the verdict is Unconfirmed and the backend answered that the
	// grant is no longer held.
	Gone bool
	// Pending: an attempt may have been applied (its outcome was unknown,
	// or its grant could not be confirmed): giving up now ends the run
	// Indeterminate.
	Pending bool
	// Unknown is the error of the last attempt whose outcome was unknown,
	// nil if none was.
	Unknown error
	// Attempts is how many attempts were sent so far.
	Attempts int
	// Fastest is the shortest round trip of the run's attempts: the
	// estimate of the next one. (One slow answer — a GC pause, a reconnect
	// — is no estimate.)
	Fastest time.Duration
}

// Result is what a run won.
type Result[G any] struct {
	Grant G
	// Base is the instant the holder's deadline counts from: the send time
	// of the attempt, or of the renewal that confirmed it, or of the
	// earliest attempt that may have been applied.
	Base time.Time
	// TTL is the lease granted, by the attempt or the confirming renewal.
	TTL time.Duration
}

// Error is why a run won nothing.
type Error struct {
	// Indeterminate: an attempt may have been applied and no answer
	// settled it; the grant may exist, held by nobody, until it expires.
	Indeterminate bool
	// Unconfirmed: the run ended on a grant that could not be confirmed
	// before its deadline.
	Unconfirmed bool
	// Err is what ended the run: the answer (Refused, Settled) or the error
	// Retry gave up with.
	Err error
	// Unknown is the error of the last attempt whose outcome was unknown,
	// nil if none was.
	Unknown error
}

// Error says what ended the run, and whether its outcome is indeterminate.
func (e *Error) Error() string {
	if e.Indeterminate {
		return "outcome indeterminate: " + e.Err.Error()
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Run sends req's attempts until one wins a grant it can trust, an answer
// ends the run, or Retry gives up. Its error is an *Error.
func Run[G any](ctx context.Context, req Request[G]) (Result[G], error) {
	var (
		firstUnknown time.Time // send time of the earliest attempt whose outcome is unknown
		lastUnknown  error
		fastest      time.Duration
	)
	for attempts := 1; ; attempts++ {
		sent := time.Now()
		g, ttl, err := req.Try(ctx)
		if rtt := time.Since(sent); attempts == 1 || rtt < fastest { // 0 is a round trip too (a coarse clock, an in-process backend)
			fastest = rtt
		}
		f := Failure{Err: err, Attempts: attempts}
		if err == nil {
			if firstUnknown.IsZero() && time.Now().Before(sent.Add(req.Span(ttl))) {
				return Result[G]{Grant: g, Base: sent, TTL: ttl}, nil
			}
			// An earlier attempt may have been applied — even after a later
			// one was refused — so this may be that grant answering
			// "yours", and the backend may count its TTL from that
			// attempt's arrival. Or this reply came so late that the
			// grant's deadline has passed: the backend may have expired it.
			first := firstUnknown
			if first.IsZero() {
				first = sent
			}
			base, granted, gone := req.Confirmation(ctx, g, ttl, first)
			if !gone && time.Now().Before(base.Add(req.Span(granted))) {
				return Result[G]{Grant: g, Base: base, TTL: granted}, nil
			}
			f.Err, f.Verdict, f.Gone = ErrUnconfirmed, Unconfirmed, gone
		} else {
			f.Verdict = req.Judge(err)
			if f.Verdict == Unknown {
				// It is not moved by later attempts: a SQL statement applied
				// late may carry the timestamp of its start, so a grant made
				// after a later refusal can still count from before it.
				if firstUnknown.IsZero() {
					firstUnknown = sent
				}
				lastUnknown = err
			}
		}
		f.Pending = !firstUnknown.IsZero() || f.Verdict == Unconfirmed
		f.Unknown, f.Fastest = lastUnknown, fastest
		switch f.Verdict {
		case Settled:
			return Result[G]{}, &Error{Err: err, Unknown: lastUnknown}
		case Refused:
			return Result[G]{}, req.giveUp(f, err)
		}
		if rerr := req.Retry(ctx, f); rerr != nil {
			return Result[G]{}, req.giveUp(f, rerr)
		}
	}
}

// giveUp ends a run after f with err, releasing what may be left.
func (req *Request[G]) giveUp(f Failure, err error) *Error {
	e := &Error{Indeterminate: f.Pending, Unconfirmed: f.Verdict == Unconfirmed, Err: err, Unknown: f.Unknown}
	// What may be left: a grant of an attempt whose outcome is unknown, or
	// one that could not be confirmed — not one confirmed gone.
	mayExist := f.Unknown != nil || (f.Verdict == Unconfirmed && !f.Gone)
	if req.Release != nil && mayExist {
		go req.Release()
	}
	return e
}

// Confirmation renews g with req.Confirm: g is a grant for ttl that may
// answer an attempt sent as early as first. It returns the instant the
// holder's deadline counts from and the TTL to count: the renewal's send
// time and TTL if the backend confirmed it (a renewal extends the lease to
// its TTL from its arrival), else first — the backend cannot have started
// the grant's TTL before it — and ttl. gone reports that the backend
// answered the grant is no longer held.
func (req *Request[G]) Confirmation(ctx context.Context, g G, ttl time.Duration, first time.Time) (base time.Time, granted time.Duration, gone bool) {
	sent := time.Now()
	rttl, err := req.Confirm(ctx, g, ttl)
	switch {
	case err == nil:
		return sent, rttl, false
	case req.IsLost(err):
		return time.Time{}, 0, true
	}
	return first, ttl, false
}
