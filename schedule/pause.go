package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Pausing. A job's paused state is kept in the backend, so that every
// instance of the namespace stops claiming the job, not only the one that
// was asked. The ledger keeps, under the reserved job name
// "<job>!pause!<namespace>", one record per change: its SpecVersion is
// "paused" or "resumed" and its instant is later than every earlier change's.
// The job's high-water mark under that name — which pruning never lowers —
// therefore always holds the latest change.
//
// Every claim loop reads the state before it claims an occurrence (one
// backend read per occurrence and instance). A pause stops claims that start
// after it was recorded; an occurrence already claimed or running goes on.
// If the state cannot be read, the occurrence is claimed as usual (a
// transient backend error must not silently skip occurrences) and a warning
// is logged. Crash recovery (the sweeper) is not affected by a pause: an
// occurrence claimed before the pause is finished by the crash policy.
// Trigger refuses a paused job with ErrPaused (it reads the state like a
// claim loop; there, a read error refuses the trigger). A job with
// StartPaused whose state was never recorded reads as paused.

const (
	pauseInfix   = backend.MetaSep + "pause" + backend.MetaSep // reserved space: see backend.MetaSep
	statePaused  = "paused"
	stateResumed = "resumed"
)

func (s *Scheduler) pauseKey(job string) string { return job + pauseInfix + s.cfg.namespace }

// Pause records, in the backend, that job is paused in this scheduler's
// namespace: no instance claims its occurrences until Resume. Pausing a
// paused job records nothing new. ErrUnknownJob if job is not registered
// here.
func (s *Scheduler) Pause(ctx context.Context, job string) error {
	return s.setPaused(ctx, job, true)
}

// Resume undoes Pause, for every instance of the namespace.
func (s *Scheduler) Resume(ctx context.Context, job string) error {
	return s.setPaused(ctx, job, false)
}

// Paused reports whether job is paused in this scheduler's namespace, as the
// backend says now.
func (s *Scheduler) Paused(ctx context.Context, job string) (bool, error) {
	if !s.registered(job) {
		return false, fmt.Errorf("%w: %q", ErrJobNotFound, job)
	}
	return s.readPaused(ctx, job)
}

func (s *Scheduler) readPaused(ctx context.Context, job string) (bool, error) {
	_, state, err := s.l.HighWater(ctx, s.pauseKey(job))
	if err != nil {
		return false, fmt.Errorf("reading the paused state of job %q: %w", job, err)
	}
	return state == statePaused || (state == "" && s.startsPaused(job)), nil
}

func (s *Scheduler) registered(job string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[job] != nil
}

// startsPaused reports whether job is registered with StartPaused.
func (s *Scheduler) startsPaused(job string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.jobs[job]
	return e != nil && e.job.StartPaused
}

func (s *Scheduler) setPaused(ctx context.Context, job string, paused bool) error {
	if !s.registered(job) {
		return fmt.Errorf("%w: %q", ErrJobNotFound, job)
	}
	key, state := s.pauseKey(job), stateResumed
	if paused {
		state = statePaused
	}
	hw, cur, err := s.l.HighWater(ctx, key)
	if err != nil {
		return fmt.Errorf("reading the paused state of job %q: %w", job, err)
	}
	if cur == state || (cur == "" && !paused && !s.startsPaused(job)) {
		return nil
	}
	at := backend.Instant(s.cfg.clock.Now())
	if !at.After(hw) {
		at = hw.Add(time.Millisecond)
	}
	for range 5 {
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		req := backend.ClaimRequest{
			Job: key, ScheduledAt: at, SpecVersion: state, Owner: owner,
			TTL: time.Minute, MaxEarly: 100 * 365 * 24 * time.Hour, // later than the mark, whatever the clocks say
		}
		g, err := s.l.Claim(ctx, req)
		var claimed *backend.ClaimedError
		switch {
		case errors.As(err, &claimed): // another change at the same instant: go after it
			at = at.Add(time.Millisecond)
			continue
		case err != nil:
			return fmt.Errorf("recording job %q as %s: %w", job, state, err)
		}
		s.cfg.logger.Info("job "+state, "job", job, "namespace", s.cfg.namespace, "at", at)
		// The state is in the high-water mark from the claim on; finishing
		// the record only keeps it out of the running list.
		_ = s.l.Finish(ctx, backend.FinishRequest{Job: key, ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: "by " + s.cfg.instance}})
		return nil
	}
	return fmt.Errorf("recording job %q as %s: too many concurrent changes", job, state)
}

// claimsPaused is the claim loops' check: true if the job is paused. A
// read error is logged and counts as not paused.
func (s *Scheduler) claimsPaused(ctx context.Context, job string) bool {
	paused, err := s.readPaused(ctx, job)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.logger.Warn("paused state unknown; claiming as usual", "job", job, "err", err)
		}
		return false
	}
	return paused
}
