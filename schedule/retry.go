package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// RetryPolicy retries an occurrence whose run failed. Each retry is a new
// attempt of the same occurrence: a Reclaim in the ledger, so it carries a
// greater fencing token and Attempt+1. The instance that ran the failed
// attempt runs it when the backoff ends (any instance's sweep does if that
// one stopped or died), and until then the occurrence holds its slot under
// Job.MaxConcurrent. Like a
// crash under CrashRetry, a retry makes execution at-least-once: a failed
// attempt may have done part of its effects.
type RetryPolicy struct {
	// Max is how many times a failed occurrence is retried (0..100; 0 = a
	// failure is final). An occurrence runs at most 1+Max attempts, and
	// crash recoveries count among them (Job.MaxAttempts).
	Max int
	// Backoff is the wait before the first retry (default 10 s); it
	// doubles after each failed retry, up to MaxBackoff (default 10 min, or
	// Backoff if that is more; at most 24 h).
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// maxRetryBackoff bounds RetryPolicy.MaxBackoff.
const maxRetryBackoff = 24 * time.Hour

// withDefaults fills the defaults of a policy with Max > 0 and validates
// it; the error names the field and the value.
func (p *RetryPolicy) withDefaults() (field string, err error) {
	switch {
	case p.Max < 0 || p.Max > 100:
		return "Retry.Max", fmt.Errorf("retry max %d is not in 0..100", p.Max)
	case p.Backoff < 0:
		return "Retry.Backoff", fmt.Errorf("retry backoff %v is negative", p.Backoff)
	case p.MaxBackoff < 0:
		return "Retry.MaxBackoff", fmt.Errorf("retry max backoff %v is negative", p.MaxBackoff)
	case p.Max == 0:
		return "", nil
	}
	if p.Backoff == 0 {
		p.Backoff = 10 * time.Second
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(10*time.Minute, p.Backoff)
	}
	switch {
	case p.MaxBackoff < p.Backoff:
		return "Retry.MaxBackoff", fmt.Errorf("retry max backoff %v is less than the backoff %v", p.MaxBackoff, p.Backoff)
	case p.MaxBackoff > maxRetryBackoff:
		return "Retry.MaxBackoff", fmt.Errorf("retry max backoff %v is more than %v", p.MaxBackoff, maxRetryBackoff)
	}
	return "", nil
}

// wait returns the backoff after the failure of attempt n (1-based).
func (p RetryPolicy) wait(n int) time.Duration {
	d := p.Backoff
	for i := 1; i < n && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// retries reports whether a failure of attempt n is retried.
func (p RetryPolicy) retries(n int) bool { return n < 1+p.Max }

// holdForRetry is what a failed attempt with retries left does instead of
// recording its failure: it keeps the occurrence running in the ledger,
// heartbeating its lease so that it lapses when the retry is due, and then
// reclaims it itself — greater token, attempt+1 — and runs the retry
// (retryWhenDue). Through the backoff the live lease holds the job's slot
// under MaxConcurrent: no later occurrence takes it before the lease lapses
// at the retry's due time; this instance's own claims also wait for the
// retry, but another instance's claim can win in the moment between the
// lapse and the reclaim, and the retry then waits for a free slot. If
// this instance stops or dies during the backoff, the lease lapses (sooner)
// and the sweep of any instance reclaims the occurrence. last is the send
// time of the last confirmed claim or heartbeat.
func (s *Scheduler) holdForRetry(e *entry, r Run, owner backend.Owner, g backend.Grant, last time.Time, log *slog.Logger) {
	wait := e.job.Retry.wait(r.Attempt)
	due := time.Now().Add(wait)
	log.Warn("run failed; it is retried after the backoff", "backoff", wait, "next attempt", r.Attempt+1)
	// This instance's sweep leaves the occurrence to the retry (recover
	// ends the guard).
	key := r.ScheduledAt.UnixNano()
	if !e.recovering.start(key) {
		return // a recovery here already: it retries
	}
	e.retrying.Add(1) // until retryWhenDue returns
	if until := time.Until(due); until <= g.TTL {
		// The lease may lapse before the retry is due: extend it to the
		// due time (a backend never moves an expiry back, so this only
		// ever makes the retry later, never sooner).
		hctx, hcancel := context.WithTimeout(s.loopCtx, g.TTL/3)
		_ = s.l.Heartbeat(hctx, backend.HeartbeatRequest{Job: r.Job, ScheduledAt: r.ScheduledAt, Owner: owner, Token: g.Token, TTL: max(until, 100*time.Millisecond)})
		hcancel()
		s.runs.Add(1)
		go func() { defer s.runs.Done(); s.retryWhenDue(e, r, owner, g, due) }()
		return
	}
	// Hold the lease through the backoff on a goroutine of its own, so the
	// occurrence's claim slot (256 per job in flight) is free meanwhile.
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		hold, cancel := context.WithDeadline(s.loopCtx, due.Add(-g.TTL))
		lost := false
		last := heartbeat(hold, s.cfg.lease, func(error) { lost = true; cancel() }, s.l, r, owner, g, last)
		cancel()
		if lost || s.loopCtx.Err() != nil {
			e.recovering.end(key)
			e.retrying.Add(-1)
			return // lost or stopping: a sweep recovers it
		}
		if time.Until(last.Add(s.cfg.lease.span(g.TTL))) > 0 {
			// One last heartbeat one TTL before the retry is due, so the
			// lease lapses then rather than up to a heartbeat interval
			// earlier. If it fails, the lease lapses at the earlier time.
			hctx, hcancel := context.WithTimeout(s.loopCtx, g.TTL/3)
			_ = s.l.Heartbeat(hctx, backend.HeartbeatRequest{Job: r.Job, ScheduledAt: r.ScheduledAt, Owner: owner, Token: g.Token, TTL: g.TTL})
			hcancel()
		}
		s.retryWhenDue(e, r, owner, g, due)
	}()
}

// retryWhenDue waits until the retry of r, a failed attempt held by
// owner, is due, then reclaims the occurrence and runs it (recover, as a
// retry). The lease lapses at about that time: while the ledger answers
// that it has not expired yet (its clock is behind ours), or that the job
// is at its concurrency limit, it tries again, with backoff — until the
// record is no longer ours (another instance's sweep reclaimed it, or it
// finished) or the scheduler stops, when a sweep recovers it. The
// occurrence's recovery guard, held since holdForRetry, ends here.
func (s *Scheduler) retryWhenDue(e *entry, r Run, owner backend.Owner, g backend.Grant, due time.Time) {
	key := r.ScheduledAt.UnixNano()
	ended := false
	end := func() {
		if !ended {
			ended = true
			e.recovering.end(key)
		}
	}
	defer end()
	defer e.retrying.Add(-1)
	ctx := s.loopCtx
	select {
	case <-ctx.Done():
		return
	case <-s.cfg.clock.After(time.Until(due)):
	}
	rec := backend.Run{Job: r.Job, ScheduledAt: r.ScheduledAt, Owner: owner, Token: g.Token, Attempt: r.Attempt, State: backend.Running, Expired: true}
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		cur, err := s.l.GetRun(ctx, r.Job, r.ScheduledAt)
		switch {
		case err == nil && (cur.State != backend.Running || cur.Owner != owner || cur.Token != g.Token):
			return // no longer ours: reclaimed elsewhere, or finished
		case err == nil:
			rec.SpecVersion = cur.SpecVersion
			ended = true // recover ends the guard
			err = s.recover(ctx, e, rec, true)
			if err == nil {
				return
			}
			if !e.recovering.start(key) {
				return // a sweep here took it over meanwhile
			}
			ended = false
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
