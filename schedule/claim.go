package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/attempt"
)

// Claim is a won claim of one occurrence, held by heartbeats until Finish.
// It is the building block for running occurrences from another scheduler
// (see the gocron and robfig/cron adapters); Scheduler uses the same rules.
type Claim struct {
	b      backend.Ledger
	run    Run
	owner  backend.Owner
	token  uint64
	ctx    context.Context
	cancel context.CancelCauseFunc
	hb     chan struct{}
	last   time.Time // send time of the last confirmed claim or heartbeat, once hb is closed
	ttl    time.Duration
	lease  leaseTiming
	start  time.Time
	once   sync.Once
	err    error
}

// ClaimOptions tune ClaimOccurrence. Zero values take the defaults.
type ClaimOptions struct {
	Instance string        // default: "leasehold"
	TTL      time.Duration // the runner's lease (default 30 s)
	MaxEarly time.Duration // how early by the backend's clock (default 1 s)
	// MaxLate refuses the claim (backend.ErrTooLate) when at is older than
	// the backend's clock less MaxLate: a misfire. 0: no bound.
	MaxLate time.Duration
	// Drift and Margin shorten the runner's deadline as for locks (see
	// leasehold.WithDrift, WithMargin): TTL × (1 − Drift) − Margin after
	// the send time of the last confirmed claim or heartbeat. Defaults
	// 0.01 and min(TTL/20, 500 ms); a zero takes the default.
	Drift  float64
	Margin time.Duration
}

// ClaimOccurrence claims the occurrence (job, at) in the ledger b. It
// returns a *backend.ClaimedError (errors.Is backend.ErrClaimed) if another
// claim came first — including one that already finished: an occurrence is
// claimed once. The claim's Context is cancelled if its lease is lost. If
// an attempt's outcome is unknown and no later answer settles it, the error
// wraps leasehold.ErrIndeterminate: the occurrence may be claimed under this
// call's owner, and its lease then expires with nobody running it. A job
// name containing backend.MetaSep is refused (leasehold.ErrInvalid): it is
// the scheduler's reserved space.
func ClaimOccurrence(ctx context.Context, b backend.Ledger, job string, at time.Time, o ClaimOptions) (*Claim, error) {
	if backend.IsJobMeta(job) {
		// The scheduler's metadata space: such a run would be missing from
		// every listing without a job, or be one of a scheduler's records.
		return nil, fmt.Errorf("%w: job name %q contains %q, which is reserved for job metadata", leasehold.ErrInvalid, job, backend.MetaSep)
	}
	if o.Instance == "" {
		o.Instance = "leasehold"
	}
	if o.TTL == 0 {
		o.TTL = 30 * time.Second
	}
	if o.MaxEarly == 0 {
		o.MaxEarly = time.Second
	}
	lease := leaseTiming{drift: o.Drift, margin: o.Margin}
	if lease.drift == 0 {
		lease.drift = defaultLease.drift
	}
	if err := lease.check(o.TTL); o.TTL > 0 && err != nil { // a bad TTL is the backend's to refuse
		return nil, err
	}
	owner := backend.Owner{Instance: o.Instance, Nonce: backend.NewNonce()}
	at = backend.Instant(at)
	req := backend.ClaimRequest{Job: job, ScheduledAt: at, Owner: owner, TTL: o.TTL, MaxEarly: o.MaxEarly, MaxLate: o.MaxLate}
	g, sent, err := claimGrant(ctx, lease, b, req)
	if err != nil {
		return nil, err
	}
	c := &Claim{
		b: b, owner: owner, token: g.Token, hb: make(chan struct{}), ttl: g.TTL, lease: lease, start: time.Now(),
		run: Run{Job: job, ScheduledAt: at, Attempt: 1, Token: leasehold.Token(g.Token), Instance: o.Instance},
	}
	c.ctx, c.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	go func() {
		defer close(c.hb)
		c.last = heartbeat(c.ctx, lease, c.cancel, b, c.run, owner, g, sent)
	}()
	return c, nil
}

// Run describes the claimed occurrence, with its fencing token.
func (c *Claim) Run() Run { return c.run }

// Context is cancelled when the claim's lease is lost or the claim is
// finished.
func (c *Claim) Context() context.Context { return c.ctx }

// Finish stops the heartbeats and records the outcome: succeeded if runErr
// is nil, failed otherwise, retrying a failure until the claim's lease
// deadline (or ctx) ends. ErrLeaseLost if the claim was lost meanwhile;
// leasehold.ErrIndeterminate if an attempt may have recorded the outcome
// but no answer settled it. Finish is idempotent: a Finish whose ctx had
// ended records nothing (the run stays running until its lease expires),
// and so does every later call; to record a run that ran through a
// shutdown, pass context.WithoutCancel(ctx) — the lease deadline still
// bounds the tries.
func (c *Claim) Finish(ctx context.Context, runErr error) error {
	c.once.Do(func() {
		c.cancel(errors.New("finished"))
		<-c.hb
		out := backend.Outcome{State: backend.Succeeded, Duration: time.Since(c.start)}
		if runErr != nil {
			out.State, out.Error = backend.Failed, runErr.Error()
		}
		c.err = finishRun(ctx, c.b, c.run.Job, c.run.ScheduledAt, c.owner, c.token, out, c.last.Add(c.lease.span(c.ttl)), c.ttl)
	})
	return c.err
}

// claimGrant claims req in b, retrying (with req's nonce) an attempt whose
// outcome is unknown, and returns the grant with the instant the runner's
// deadline counts from. A grant that may answer an earlier attempt applied
// late is confirmed with a heartbeat. Refusals (claimed, invalid, too early,
// overlap) are returned as they are, unless an earlier attempt may still be
// applied: then the error wraps leasehold.ErrIndeterminate.
func claimGrant(ctx context.Context, lease leaseTiming, b backend.Ledger, req backend.ClaimRequest) (backend.Grant, time.Time, error) {
	a := claimAttempt(b, lease, req, func(g backend.Grant) uint64 { return g.Token })
	a.Try = func(ctx context.Context) (backend.Grant, time.Duration, error) {
		g, err := b.Claim(ctx, req)
		return g, g.TTL, err
	}
	a.Judge = func(err error) attempt.Verdict { return judgeClaim(err, attempt.Refused) }
	a.Retry = func(ctx context.Context, f attempt.Failure) error {
		// At once, three times at most: the caller has its own schedule.
		if f.Verdict == attempt.Unconfirmed || ctx.Err() != nil || f.Attempts >= 3 {
			return f.Err
		}
		return nil
	}
	r, err := attempt.Run(ctx, a)
	if err == nil {
		return r.Grant, r.Base, nil
	}
	var e *attempt.Error
	switch {
	case !errors.As(err, &e):
		return backend.Grant{}, time.Time{}, err
	case !e.Indeterminate:
		return backend.Grant{}, time.Time{}, e.Err // the answer, as it is
	case e.Unconfirmed:
		return backend.Grant{}, time.Time{}, fmt.Errorf("%w: claim %s@%s: won after an attempt whose outcome was unknown, and not confirmed in time",
			leasehold.ErrOutcomeIndeterminate, req.Job, req.ScheduledAt.Format(time.RFC3339Nano))
	}
	// A refusal (too early, overlap) or another failure does not undo an
	// earlier attempt that may still be applied: the claim may be ours,
	// held by nobody, until its lease expires.
	return backend.Grant{}, time.Time{}, fmt.Errorf("%w: claim %s@%s: an attempt's outcome is unknown: %w",
		leasehold.ErrOutcomeIndeterminate, req.Job, req.ScheduledAt.Format(time.RFC3339Nano), e.Err)
}

// claimAttempt is what every claim of req (Claim, Reclaim) shares in the
// attempt engine: the lease timing, and the heartbeat that confirms a
// grant that may answer an earlier attempt applied late. token is the
// fencing token of what an attempt won.
func claimAttempt[G any](l backend.Ledger, lease leaseTiming, req backend.ClaimRequest, token func(G) uint64) attempt.Request[G] {
	return attempt.Request[G]{
		Span: lease.span,
		// Bounded like a heartbeat, not by the earliest attempt's deadline:
		// a heartbeat that succeeds proves the lease was live when it
		// arrived and extends it, however old that attempt is.
		Confirm: func(ctx context.Context, g G, ttl time.Duration) (time.Duration, error) {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl/3)
			defer cancel()
			return ttl, l.Heartbeat(hctx, backend.HeartbeatRequest{Job: req.Job, ScheduledAt: req.ScheduledAt, Owner: req.Owner, Token: token(g), TTL: req.TTL})
		},
		IsLost: func(err error) bool { return errors.Is(err, backend.ErrLeaseLost) },
	}
}

// judgeClaim says what a failed Claim or Reclaim attempt's error proves;
// early is the verdict on "too early" (a claim that polls until the
// instant is due by the ledger's clock says NotApplied).
func judgeClaim(err error, early attempt.Verdict) attempt.Verdict {
	switch {
	case errors.Is(err, backend.ErrOccurrenceClaimed):
		// Another owner's claim: a retry of an attempt of ours that was
		// applied would have answered "yours".
		return attempt.Settled
	case errors.Is(err, backend.ErrOccurrenceTooEarly):
		return early
	case errors.Is(err, backend.ErrOccurrenceOverlap), errors.Is(err, backend.ErrOccurrenceTooLate), errors.Is(err, backend.ErrInvalid),
		errors.Is(err, backend.ErrClosed), errors.Is(err, backend.ErrLeaseNotExpired), errors.Is(err, backend.ErrNotFound),
		errors.Is(err, backend.ErrOccurrenceExhausted):
		return attempt.Refused
	case errors.Is(err, backend.ErrNotApplied):
		return attempt.NotApplied
	}
	return attempt.Unknown // timed out, connection lost, ...: it may have been applied
}
