package schedule

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// errClaimUnconfirmed: a claim answered after an attempt with an unknown
// outcome could not be confirmed while its lease could still be trusted.
var errClaimUnconfirmed = errors.New("claim could not be confirmed before its deadline")

// maxInflight bounds the occurrences of one job whose claim (or run) is in
// progress on this instance.
const maxInflight = 256

// loop is one job's timer: it computes the job's instants and claims each
// as it comes due. It never takes s.mu (Replace waits for it under s.mu).
func (s *Scheduler) loop(ctx context.Context, e *entry) {
	log := s.cfg.logger.With("job", e.job.Name)
	cursor := s.cfg.clock.Now()
	if e.job.Mode != EveryInstance {
		if err := s.ensureVersion(ctx, e); err != nil {
			log.Error("recording the schedule version failed; claims wait for it", "err", err)
		}
		s.catchUp(ctx, e, cursor)
	}
	for {
		at := e.spec.Next(cursor)
		if at.IsZero() {
			log.Warn("schedule has no further occurrences")
			return
		}
		if !s.sleepUntil(ctx, at) {
			return
		}
		cursor = at
		switch {
		case e.job.Mode == EveryInstance:
			s.local(e, at)
		case e.job.Mode == Leader && !s.leading.is():
			// only the leader claims
		case e.inflight.Load() >= maxInflight:
			// Claims are falling behind (backend too slow for the schedule):
			// skip rather than pile up goroutines; catch-up policies apply.
			log.Warn("claims are falling behind the schedule; occurrence skipped", "at", at, "in flight", e.inflight.Load())
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
}

// occur claims the occurrence at and runs it if the claim is won.
func (s *Scheduler) occur(ctx context.Context, e *entry, at time.Time) {
	log := s.cfg.logger.With("job", e.job.Name, "at", at)
	if e.job.Jitter > 0 { // delays the run, never the key
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(rand.N(e.job.Jitter)):
		}
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
			if !firstUnknown.IsZero() || time.Until(sent.Add(safeSpan(g.TTL))) <= 0 {
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
				if time.Until(base.Add(safeSpan(g.TTL))) <= 0 {
					// Not confirmed, and the earliest instant the lease may
					// count from is too old to run under: try again (a retry
					// answers "yours" and renews the lease).
					err = errClaimUnconfirmed
					break
				}
			}
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Token: leasehold.Token(g.Token),
				Attempt: 1, Result: ClaimWon, CatchUp: isCatchUp(ctx)})
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
		if attempt >= 10 {
			log.Error("claim failed; misfire policy decides on recovery", "err", err)
			s.emit(Event{Kind: EventClaim, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Result: ClaimError, CatchUp: isCatchUp(ctx), Err: err})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(backoff):
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

// catchUp handles occurrences that passed while no instance claimed them,
// by the job's misfire policy. It reads the job's high-water mark (latest
// claimed instant), which pruning history never lowers.
func (s *Scheduler) catchUp(ctx context.Context, e *entry, now time.Time) {
	if e.job.Misfire == MisfireSkip {
		return
	}
	hw, ver, err := s.l.HighWater(ctx, e.job.Name)
	if err != nil {
		s.cfg.logger.Warn("reading the high-water mark failed; no catch-up", "job", e.job.Name, "err", err)
		return
	}
	if hw.IsZero() {
		return // never ran anywhere: nothing was missed
	}
	from := hw
	if strings.HasPrefix(ver, TriggerVersionPrefix) {
		// The mark is a triggered run's instant, which says nothing of the
		// scheduled occurrences before it: start after the latest scheduled
		// run instead.
		from = s.lastScheduled(ctx, e, hw, now.Add(-e.job.MisfireWindow))
	}
	if w := now.Add(-e.job.MisfireWindow); w.After(from) {
		from = w
	}
	var missed []time.Time
	for at := e.spec.Next(from); !at.IsZero() && !at.After(now); at = e.spec.Next(at) {
		missed = append(missed, at)
		if len(missed) > e.job.MaxCatchUp {
			missed = missed[1:] // keep the latest
		}
	}
	if len(missed) == 0 {
		return
	}
	if e.job.Misfire == MisfireRunOnce {
		missed = missed[len(missed)-1:]
	}
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		for _, at := range missed { // one after another: the rate bound
			if ctx.Err() != nil {
				return
			}
			s.cfg.logger.Info("catching up a missed occurrence", "job", e.job.Name, "at", at)
			s.occur(context.WithValue(ctx, catchUpKey{}, true), e, at)
		}
	}()
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
