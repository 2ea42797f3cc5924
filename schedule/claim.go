package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
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
// but no answer settled it. Finish is idempotent.
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
	job, at := req.Job, req.ScheduledAt
	var (
		g    backend.Grant
		err  error
		sent time.Time
		// firstUnknown is the send time of the first attempt whose outcome
		// is unknown: it may be applied, even later, and a retry answering
		// "yours" then returns the grant it made.
		firstUnknown time.Time
	)
	for attempt := 0; attempt < 3; attempt++ { // retries reuse the nonce: an applied claim answers "yours"
		sent = time.Now()
		g, err = b.Claim(ctx, req)
		if err == nil || errors.Is(err, backend.ErrClaimed) || errors.Is(err, backend.ErrInvalid) ||
			errors.Is(err, backend.ErrTooEarly) || errors.Is(err, backend.ErrTooLate) || errors.Is(err, backend.ErrOverlap) {
			break
		}
		if firstUnknown.IsZero() && !errors.Is(err, backend.ErrNotApplied) && !errors.Is(err, backend.ErrClosed) {
			firstUnknown = sent
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err == nil && firstUnknown.IsZero() && time.Until(sent.Add(lease.span(g.TTL))) <= 0 {
		firstUnknown = sent // the reply came after the deadline its send time gives
	}
	switch {
	case err == nil && !firstUnknown.IsZero():
		// Confirm with a heartbeat, as the Scheduler does: the lease may
		// count from the first attempt, possibly long ago.
		base, lost := confirmGrant(ctx, b, req, g, firstUnknown)
		if lost || time.Until(base.Add(lease.span(g.TTL))) <= 0 {
			return backend.Grant{}, time.Time{}, fmt.Errorf("%w: claim %s@%s: won after an attempt whose outcome was unknown, and not confirmed in time",
				leasehold.ErrIndeterminate, job, at.Format(time.RFC3339Nano))
		}
		sent = base
	case err == nil:
	case !firstUnknown.IsZero() && !errors.Is(err, backend.ErrClaimed) && !errors.Is(err, backend.ErrInvalid):
		// A refusal (too early, overlap) or another failure does not undo
		// an earlier attempt that may still be applied: the claim may be
		// ours, held by nobody, until its lease expires.
		return backend.Grant{}, time.Time{}, fmt.Errorf("%w: claim %s@%s: an attempt's outcome is unknown: %w",
			leasehold.ErrIndeterminate, job, at.Format(time.RFC3339Nano), err)
	default:
		return backend.Grant{}, time.Time{}, err
	}
	return g, sent, nil
}
