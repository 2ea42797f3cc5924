package schedule

import (
	"context"
	"errors"
	"fmt"
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
		now := s.cfg.clock.Now()
		due := s.dueSince(e, at, now)
		cursor = due[len(due)-1]
		onTime, late := s.misfired(e, due, now)
		if len(late) > 0 && e.job.Mode != EveryInstance && !(e.job.Mode == Leader && !s.leading.is()) &&
			s.misfire(ctx, e, late, now, onTime) {
			continue // run after the late ones
		}
		for _, at := range onTime {
			s.due(ctx, e, at)
		}
	}
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

// dueSince returns the instants from at (due) up to now, oldest first:
// more than one when this process did not look for a while (it was paused,
// starved, or its clock stepped forward). Instants older than the misfire
// window are left out, as catch-up leaves them, so a clock step of a year
// does not enumerate a year of instants.
func (s *Scheduler) dueSince(e *entry, at, now time.Time) []time.Time {
	due := []time.Time{at}
	if w := now.Add(-e.job.MisfireWindow); at.Before(w) {
		due = due[:0]
		if n := e.spec.Next(w.Add(-time.Millisecond)); !n.IsZero() && !n.After(now) {
			due = append(due, n)
		}
		if len(due) == 0 {
			return []time.Time{at} // nothing in the window: at is the only (late) one
		}
	}
	for n := e.spec.Next(due[len(due)-1]); !n.IsZero() && !n.After(now); n = e.spec.Next(n) {
		due = append(due, n)
	}
	return due
}

// misfired splits instants that came due (oldest first) into those still
// within the misfire grace and the misfired rest (late by more).
func (s *Scheduler) misfired(e *entry, due []time.Time, now time.Time) (onTime, late []time.Time) {
	i := 0
	for i < len(due) && now.Sub(due[i]) > e.job.MisfireGrace {
		i++
	}
	return due[i:], due[:i]
}

// misfire applies the job's misfire policy to instants that came due late
// (oldest first): skip forgets them, run-once claims the latest of them
// unless an on-time instant runs anyway, run-all claims each of the latest
// MaxCatchUp one after another — followed by the on-time ones, so that
// runs keep their order. It reports whether it took the on-time instants
// over.
func (s *Scheduler) misfire(ctx context.Context, e *entry, late []time.Time, now time.Time, onTime []time.Time) (took bool) {
	s.cfg.logger.Warn("occurrences came due later than the misfire grace (this process was paused, starved or its clock stepped forward)",
		"job", e.job.Name, "count", len(late), "first", late[0], "last", late[len(late)-1], "now", now,
		"grace", e.job.MisfireGrace, "policy", e.job.Misfire)
	s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: late[len(late)-1], Count: len(late), Result: string(e.job.Misfire)})
	switch e.job.Misfire {
	case MisfireRunOnce:
		if len(onTime) == 0 {
			s.catchUpRun(ctx, e, late[len(late)-1:], nil)
		}
	case MisfireRunAll:
		if len(late) > e.job.MaxCatchUp {
			late = late[len(late)-e.job.MaxCatchUp:]
		}
		s.catchUpRun(ctx, e, late, onTime)
		return true
	}
	return false
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
		// its clock: a process that woke that late never claims it.
		MaxLate: e.job.MisfireWindow + s.cfg.tolerance,
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
			log.Warn("occurrence misfired: the backend's clock says it is older than the misfire window; not claimed", "err", err)
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

// skipMisfired records a claim won later than the misfire grace, under
// policy skip, as failed without running it: the occurrence is claimed
// (nobody else runs it) and the record says why it did not run.
func (s *Scheduler) skipMisfired(e *entry, req backend.ClaimRequest, g backend.Grant, sent time.Time, late time.Duration) {
	msg := fmt.Sprintf("misfire: the claim was won %v later than the misfire grace %v; not run (misfire policy skip)", late.Round(time.Millisecond), e.job.MisfireGrace)
	s.cfg.logger.Warn("occurrence misfired: its claim was won later than the misfire grace; recorded as failed, not run",
		"job", e.job.Name, "at", req.ScheduledAt, "late by", late, "grace", e.job.MisfireGrace)
	s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Token: leasehold.Token(g.Token), Count: 1, Result: string(e.job.Misfire)})
	out := backend.Outcome{State: backend.Failed, Error: msg}
	if err := finishRun(context.Background(), s.l, req.Job, req.ScheduledAt, req.Owner, g.Token, out, sent.Add(safeSpan(g.TTL)), g.TTL); err != nil {
		s.cfg.logger.Warn("recording a misfired occurrence failed; the crash policy applies to it", "job", e.job.Name, "at", req.ScheduledAt, "err", err)
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
	hw, _, err := s.l.HighWater(ctx, e.job.Name)
	if err != nil {
		s.cfg.logger.Warn("reading the high-water mark failed; no catch-up", "job", e.job.Name, "err", err)
		return
	}
	if hw.IsZero() {
		return // never ran anywhere: nothing was missed
	}
	from := hw
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
	s.catchUpRun(ctx, e, missed, nil)
}

// catchUpRun claims and runs the misfired instants ats, then the on-time
// instants then, one after another: the rate bound of catch-up.
func (s *Scheduler) catchUpRun(ctx context.Context, e *entry, ats, then []time.Time) {
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		for _, at := range ats {
			if ctx.Err() != nil {
				return
			}
			s.cfg.logger.Info("catching up a missed occurrence", "job", e.job.Name, "at", at)
			s.occur(context.WithValue(ctx, catchUpKey{}, true), e, at)
		}
		for _, at := range then {
			if ctx.Err() != nil {
				return
			}
			s.occur(ctx, e, at)
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
