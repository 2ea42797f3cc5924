package schedule

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// errClaimUnconfirmed: a claim answered after an attempt with an unknown
// outcome could not be confirmed while its lease could still be trusted.
var errClaimUnconfirmed = errors.New("claim could not be confirmed before its deadline")

// maxEarlyWait bounds how long a claim is retried while the backend
// answers ErrTooEarly (this host's clock runs that far ahead of it).
const maxEarlyWait = 10 * time.Second

// maxInflight bounds the occurrences of one job whose claim (or run) is in
// progress on this instance.
const maxInflight = 256

// startUp is a job's start-up work, before its timer runs: it records the
// job's schedule version and catches up what passed while no instance ran,
// by the job's misfire policy, and returns the cursor the timer continues
// from: registered, when the job was started (instants since are the
// timer's), or, after catch-up, the instant catch-up covered up to. It
// never takes s.mu (Replace waits for it under s.mu).
func (s *Scheduler) startUp(ctx context.Context, e *entry, registered time.Time) time.Time {
	cursor := registered
	if err := s.ensureVersion(ctx, e); err != nil {
		s.cfg.logger.Error("recording the schedule version failed; claims wait for it", "job", e.job.Name, "err", err)
	}
	if e.job.Misfire != MisfireSkip {
		// Catch-up covers what passed until now, the timer what comes
		// after (late ones go to the same queue, bounded together).
		cursor = s.cfg.clock.Now()
		s.catchUp(ctx, e, cursor)
	}
	return cursor
}

// due starts the claim (or the local run) of an on-time instant.
func (s *Scheduler) due(ctx context.Context, e *entry, at time.Time) {
	switch {
	case e.job.Mode == EveryInstance:
		s.local(e, at)
	case e.job.Mode == Leader && !s.leading.is():
		// only the leader claims
	case e.inflight.Load() >= maxInflight:
		// Claims are falling behind (backend too slow for the schedule):
		// skip rather than pile up goroutines; catch-up policies apply.
		s.cfg.logger.Warn("claims are falling behind the schedule; occurrence skipped", "job", e.job.Name, "at", at, "in flight", e.inflight.Load())
	case e.queue.busy():
		// Catch-up runs are under way: this instant runs after them, so
		// that runs keep their order.
		e.queue.push(s, ctx, e, queued{at: at})
	default:
		s.runs.Add(1)
		e.inflight.Add(1)
		go func() {
			defer s.runs.Done()
			defer e.inflight.Add(-1)
			s.occur(ctx, e, at)
		}()
	}
}

// occur claims the occurrence at and runs it if the claim is won.
func (s *Scheduler) occur(ctx context.Context, e *entry, at time.Time) {
	log := s.cfg.logger.With("job", e.job.Name, "at", at)
	var delay time.Duration
	if e.job.Jitter > 0 { // delays the run, never the key
		delay = rand.N(e.job.Jitter)
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(delay):
		}
	}
	// lateBy reports how late the occurrence is beyond its grace, if it is
	// on-time work under policy skip: a run that would start that late is a
	// misfire (the claim was slow, or the process stalled on the way). It
	// is measured on the scheduler's clock when the claim starts, then in
	// real time — less the waits after ErrTooEarly, which say the
	// occurrence was early by the backend's clock, not late.
	lateAtStart, t0 := s.cfg.clock.Now().Sub(at)-delay, time.Now()
	var earlyWait time.Duration
	lateBy := func() time.Duration {
		if isCatchUp(ctx) || e.job.Misfire != MisfireSkip {
			return 0
		}
		return max(0, lateAtStart+time.Since(t0)-earlyWait-e.job.MisfireGrace)
	}
	if d := lateBy(); d > 0 {
		log.Warn("occurrence misfired: it came due later than the misfire grace; skipped", "late by", d, "grace", e.job.MisfireGrace)
		s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: at, Count: 1, Result: string(e.job.Misfire)})
		return
	}
	if s.claimsPaused(ctx, e.job.Name) {
		log.Debug("occurrence not claimed: the job is paused")
		return
	}
	if ok, err := s.versionAllows(ctx, e, at); err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			log.Warn("schedule version unknown; not claiming", "err", err)
		}
		return
	}
	owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
	req := backend.ClaimRequest{
		Job: e.job.Name, ScheduledAt: at, SpecVersion: e.spec.Version(), Owner: owner,
		TTL: e.job.LeaseTTL, MaxEarly: s.cfg.tolerance, MaxRunning: e.job.MaxConcurrent,
		// The ledger refuses an instant older than the misfire window by
		// its clock: a process that woke that late never claims it. Under
		// policy skip an on-time claim may not be later than the grace by
		// the ledger's clock either: a host whose clock runs behind (or
		// was stepped back) thinks a late instant on time. Jitter delays
		// the send, not the instant.
		MaxLate: e.job.MisfireWindow + s.cfg.tolerance + e.job.Jitter,
	}
	if e.job.Misfire == MisfireSkip && !isCatchUp(ctx) {
		req.MaxLate = e.job.MisfireGrace + s.cfg.tolerance + e.job.Jitter
	}
	backoff := 10 * time.Millisecond
	// firstUnknown is the send time of the oldest attempt whose outcome is
	// unknown. It is kept for the whole call: such an attempt may still be
	// applied after a later one was refused (too early, say), and then a
	// retry answers "yours" with the grant it made.
	var firstUnknown time.Time
	for attempt := 0; ; attempt++ {
		sent := time.Now() // lease timing is real time, whatever clock schedules
		g, err := s.l.Claim(ctx, req)
		var claimed *backend.ClaimedError
		switch {
		case err == nil:
			base := sent
			if !firstUnknown.IsZero() || time.Until(sent.Add(s.cfg.lease.span(g.TTL))) <= 0 {
				// An earlier attempt may have been applied, or this reply
				// came after the deadline its send time gives: the backend
				// may count the lease from earlier, or have expired it.
				first := firstUnknown
				if first.IsZero() {
					first = sent
				}
				var lost bool
				if base, lost = s.confirmClaim(ctx, req, g, first); lost {
					log.Warn("claim expired before it could be confirmed; the crash policy decides on recovery")
					return
				}
				if time.Until(base.Add(s.cfg.lease.span(g.TTL))) <= 0 {
					// Not confirmed, and the earliest instant the lease may
					// count from is too old to run under: try again (a retry
					// answers "yours" and renews the lease).
					err = errClaimUnconfirmed
					break
				}
			}
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Token: leasehold.Token(g.Token),
				Attempt: 1, Result: ClaimWon, CatchUp: isCatchUp(ctx)})
			if d := lateBy(); d > 0 {
				s.skipMisfired(e, req, g, base, d)
				return
			}
			s.execute(e, Run{Job: e.job.Name, ScheduledAt: backend.Instant(at), Attempt: 1, Instance: s.cfg.instance}, owner, g, base)
			return
		case errors.As(err, &claimed):
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimConflict, CatchUp: isCatchUp(ctx)})
			if claimed.Run.State == backend.Running && claimed.Run.Expired {
				s.recoverRun(ctx, e, claimed.Run)
			}
			return
		case errors.Is(err, backend.ErrOverlap):
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimOverlap, CatchUp: isCatchUp(ctx), Err: err})
			log.Info("occurrence skipped: the job is already running at its concurrency limit", "err", err)
			return
		case errors.Is(err, backend.ErrTooLate):
			log.Warn("occurrence misfired: by the backend's clock it is later than the misfire grace (skip) or window; not claimed", "err", err)
			s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Count: 1, Result: string(e.job.Misfire), Err: err})
			return
		case errors.Is(err, backend.ErrInvalid), errors.Is(err, backend.ErrClosed):
			log.Error("claim rejected", "err", err)
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimError, CatchUp: isCatchUp(ctx), Err: err})
			return
		case errors.Is(err, backend.ErrTooEarly):
			// This host's clock runs ahead of the backend's; try again soon.
			// This attempt was not applied; an earlier one may still be.
		default:
			// Unknown outcome: retry with the same nonce ("yours" if applied).
			if firstUnknown.IsZero() {
				firstUnknown = sent
			}
		}
		if ctx.Err() != nil {
			return // stopping: unclaimed occurrences are left to the misfire policy
		}
		wait, early := backoff, errors.Is(err, backend.ErrTooEarly)
		if early && earlyWait < maxEarlyWait {
			// Not an attempt spent: the instant is not due yet by the
			// backend's clock (this host's clock is ahead, or stepped
			// forward). Poll finely enough to start within the grace.
			attempt--
			wait = min(backoff, max(10*time.Millisecond, e.job.MisfireGrace/4))
		}
		if attempt >= 10 {
			log.Error("claim failed; misfire policy decides on recovery", "err", err)
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimError, CatchUp: isCatchUp(ctx), Err: err})
			return
		}
		waited := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(wait):
		}
		if early {
			earlyWait += time.Since(waited)
		}
		backoff = min(backoff*2, time.Second)
	}
}

// confirmClaim heartbeats a won claim that may be the answer to an earlier
// attempt applied late, and returns the instant the runner's deadline counts
// from: the heartbeat's send time if the backend confirmed it (it extends
// the lease to the TTL from its arrival), else first, the send time of the
// earliest attempt that may have been applied. lost reports that the lease
// ran out before it could be confirmed.
func (s *Scheduler) confirmClaim(ctx context.Context, req backend.ClaimRequest, g backend.Grant, first time.Time) (base time.Time, lost bool) {
	return confirmGrant(ctx, s.l, req, g, first)
}

// confirmGrant is confirmClaim over any ledger (ClaimOccurrence uses it).
func confirmGrant(ctx context.Context, l backend.Ledger, req backend.ClaimRequest, g backend.Grant, first time.Time) (base time.Time, lost bool) {
	// Bounded like a heartbeat, not by first's deadline: a heartbeat that
	// succeeds proves the lease was live when it arrived and extends it,
	// however old first is.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.TTL/3)
	defer cancel()
	sent := time.Now()
	err := l.Heartbeat(hctx, req.Job, req.ScheduledAt, req.Owner, g.Token, req.TTL)
	switch {
	case err == nil:
		return sent, false
	case errors.Is(err, backend.ErrLeaseLost):
		return time.Time{}, true
	}
	return first, false
}

// local runs an every-instance occurrence with no claim.
func (s *Scheduler) local(e *entry, at time.Time) {
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		if s.claimsPaused(s.loopCtx, e.job.Name) {
			return
		}
		ctx, cancel := s.runContext(e)
		defer cancel(nil)
		r := Run{Job: e.job.Name, ScheduledAt: backend.Instant(at), Attempt: 1, Instance: s.cfg.instance}
		start := time.Now()
		err := safeCall(ctx, e.job.Func, r)
		s.emitRun(r, time.Since(start), err)
	}()
}
