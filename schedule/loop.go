package schedule

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/attempt"
)

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
// timer's), or, after catch-up, the instant catch-up covered up to. A job
// registered again after Remove continues from where its timer stopped
// (registered is that instant; see resumeCursor): its timer applies the
// misfire policy to what came due meanwhile, without a catch-up, and
// takeBack claims the instants its previous registration handed back. It
// never takes s.mu (Replace waits for it under s.mu).
func (s *Scheduler) startUp(ctx context.Context, e *entry, registered time.Time) time.Time {
	cursor := registered
	if err := s.ensureVersion(ctx, e); err != nil {
		s.cfg.logger.Error("recording the schedule version failed; claims wait for it", "job", e.job.Name, "err", err)
	}
	if e.job.Misfire != MisfireSkip && e.resume.IsZero() {
		// Catch-up covers what passed until now, the timer what comes
		// after (late ones go to the same queue, bounded together).
		cursor = s.cfg.clock.Now()
		s.catchUp(ctx, e, cursor)
	}
	return cursor
}

// due starts the claim (or the local run) of an on-time instant.
func (s *Scheduler) due(ctx context.Context, e *entry, at time.Time) {
	s.dispatch(ctx, e, &waiting{at: at})
}

// dispatch starts the claim (or the local run) of w, an on-time instant.
// Until its claim settles, w is in e.waits (handback.go).
func (s *Scheduler) dispatch(ctx context.Context, e *entry, w *waiting) {
	switch {
	case e.job.Mode == EveryInstance:
		s.local(e, w.at)
	case e.job.Mode == Leader && !s.leading.is():
		// only the leader claims
		e.waits.settle(w)
	case e.inflight.Load() >= maxInflight:
		// Claims are falling behind (backend too slow for the schedule):
		// skip rather than pile up goroutines; catch-up policies apply.
		s.cfg.logger.Warn("claims are falling behind the schedule; occurrence skipped", "job", e.job.Name, "at", w.at, "in flight", e.inflight.Load())
		e.waits.settle(w)
	case e.queue.busy():
		// Catch-up runs are under way: this instant runs after them, so
		// that runs keep their order.
		e.queue.push(s, ctx, e, w)
	default:
		e.waits.add(w)
		s.runs.Add(1)
		e.inflight.Add(1)
		go func() {
			defer s.runs.Done()
			defer e.inflight.Add(-1)
			s.claimWaiting(ctx, e, w)
		}()
	}
}

// occur claims the occurrence at and runs it if the claim is won.
func (s *Scheduler) occur(ctx context.Context, e *entry, at time.Time) {
	s.claimWaiting(ctx, e, &waiting{at: at})
}

// claimWaiting claims the occurrence w and runs it if the claim is won.
// Once the claim is settled (an answer, a misfire, a policy), w is settled
// in e.waits; if ctx ends first (the job was removed), w stays there, to
// be handed back to the job registered again (handback.go).
func (s *Scheduler) claimWaiting(ctx context.Context, e *entry, w *waiting) {
	w.enter()
	defer w.leave()
	at := w.at
	log := s.cfg.logger.With("job", e.job.Name, "at", at)
	settled := false
	settle := func() { settled = true; e.waits.settle(w) }
	defer func() {
		if !settled && ctx.Err() == nil {
			e.waits.settle(w) // given up for good (claimRetry said why)
		}
	}()
	// Jitter delays the run, never the key. An instant handed back
	// continues the delay drawn for it.
	delay, left := w.jitter(e.job.Jitter, s.cfg.clock.Now())
	if left > 0 {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(left):
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
	misfired := func() bool {
		if ctx.Err() != nil {
			// Stopped (Remove, Replace, Shutdown) before the ledger
			// answered: the instant is handed back, and its fate is the
			// next registration's — this one records nothing for it
			// (hostile review: a misfire was recorded here for an
			// instant the job registered again had run).
			return true
		}
		d := lateBy()
		if d > 0 {
			log.Warn("occurrence misfired: it came due later than the misfire grace; skipped", "late by", d, "grace", e.job.MisfireGrace)
			s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: at, Count: 1, Result: string(e.job.Misfire)})
		}
		if d > 0 {
			settle()
		}
		return d > 0
	}
	if misfired() {
		return
	}
	if s.claimsPaused(ctx, e.job.Name) {
		if ctx.Err() != nil {
			return // stopped meanwhile: handed back, as above
		}
		log.Debug("occurrence not claimed: the job is paused")
		settle()
		return
	}
	if ok, err := s.versionAllows(ctx, e, at); err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			log.Warn("schedule version unknown; not claiming", "err", err)
		}
		if err == nil && ctx.Err() == nil {
			settle() // another schedule version's instant
		}
		return
	}
	// Again after those reads: on a slow backend they can take longer than
	// the grace, and a claim sent late can only be refused as too late —
	// after it took the ledger's time (and, on SQL ledgers, the job's row
	// lock) from the claims that can still win.
	if misfired() {
		return
	}
	if m := e.job.MaxConcurrent; m > 0 && int(e.retrying.Load()) >= m {
		// Retries pending here hold every slot: the ledger would refuse
		// this claim while their leases live, and must not grant it in the
		// moment a lease lapses before its retry reclaims it.
		log.Info("occurrence skipped: the job is at its concurrency limit with retries waiting for their backoff")
		s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: at, Result: ClaimOverlap, CatchUp: isCatchUp(ctx)})
		settle()
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
	a := claimAttempt(s.l, s.cfg.lease, req, func(g backend.Grant) uint64 { return g.Token })
	a.Try = func(ctx context.Context) (backend.Grant, time.Duration, error) {
		g, err := s.l.Claim(ctx, req)
		return g, g.TTL, err
	}
	a.Judge = func(err error) attempt.Verdict { return judgeClaim(err, attempt.NotApplied) }
	a.Retry = s.claimRetry(e, req, log, &earlyWait)
	r, err := attempt.Run(ctx, a)
	var claimed *backend.ClaimedError
	if err == nil || errors.As(err, &claimed) || errors.Is(err, backend.ErrOccurrenceOverlap) || errors.Is(err, backend.ErrOccurrenceTooLate) ||
		errors.Is(err, backend.ErrInvalid) || errors.Is(err, backend.ErrClosed) {
		settle() // an answer: before a run, which may outlive the job's registration
	}
	switch {
	case err == nil:
		g := r.Grant
		s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Token: leasehold.Token(g.Token),
			Attempt: 1, Result: ClaimWon, CatchUp: isCatchUp(ctx)})
		if d := lateBy(); d > 0 {
			s.skipMisfired(e, req, g, r.Base, d)
			return
		}
		s.execute(e, Run{Job: e.job.Name, ScheduledAt: backend.Instant(at), Attempt: 1, Instance: s.cfg.instance}, owner, g, r.Base)
	case errors.As(err, &claimed):
		s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimConflict, CatchUp: isCatchUp(ctx)})
		if claimed.Run.State == backend.Running && claimed.Run.Expired {
			s.recoverRun(ctx, e, claimed.Run)
		}
	case errors.Is(err, backend.ErrOccurrenceOverlap):
		s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimOverlap, CatchUp: isCatchUp(ctx), Err: err})
		log.Info("occurrence skipped: the job is already running at its concurrency limit", "err", err)
	case errors.Is(err, backend.ErrOccurrenceTooLate):
		log.Warn("occurrence misfired: by the backend's clock it is later than the misfire grace (skip) or window; not claimed", "err", err)
		s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Count: 1, Result: string(e.job.Misfire), Err: err})
	case errors.Is(err, backend.ErrInvalid), errors.Is(err, backend.ErrClosed):
		log.Error("claim rejected", "err", err)
		s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimError, CatchUp: isCatchUp(ctx), Err: err})
	}
	// Otherwise claimRetry gave up and said why; an unclaimed occurrence is
	// left to the misfire policy, one claimed but not run to the crash
	// policy — or, if it gave up because the job was removed, handed back
	// to the job registered again.
}

// claimRetry is the Retry of an occurrence's claim: it waits a backoff on
// the scheduler's clock, polls finely while the ledger answers "too early"
// (adding the wait to *earlyWait), and gives up after ten spent attempts,
// when the scheduler stops, or when a grant is found lost before it could
// be confirmed.
func (s *Scheduler) claimRetry(e *entry, req backend.ClaimRequest, log *slog.Logger, earlyWait *time.Duration) func(context.Context, attempt.Failure) error {
	backoff, spent := 10*time.Millisecond, 0
	return func(ctx context.Context, f attempt.Failure) error {
		if f.Gone {
			log.Warn("claim expired before it could be confirmed; the crash policy decides on recovery")
			return f.Err
		}
		if ctx.Err() != nil {
			return ctx.Err() // stopping: unclaimed occurrences are left to the misfire policy
		}
		wait, early := backoff, errors.Is(f.Err, backend.ErrOccurrenceTooEarly)
		if early && *earlyWait < maxEarlyWait {
			// Not an attempt spent: the instant is not due yet by the
			// backend's clock (this host's clock is ahead, or stepped
			// forward). Poll finely enough to start within the grace.
			spent--
			wait = min(backoff, max(10*time.Millisecond, e.job.MisfireGrace/4))
		}
		if spent >= 10 {
			log.Error("claim failed; misfire policy decides on recovery", "err", f.Err)
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimError, CatchUp: isCatchUp(ctx), Err: f.Err})
			return f.Err
		}
		waited := time.Now()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.clock.After(wait):
		}
		if early {
			*earlyWait += time.Since(waited)
		}
		backoff = min(backoff*2, time.Second)
		spent++
		return nil
	}
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
