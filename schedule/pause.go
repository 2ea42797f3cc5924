package schedule

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/backend"
)

// Pausing. A job's paused state is kept in the backend, so that every
// instance of the namespace stops claiming the job, not only the one that
// was asked. The record store keeps, under the name
// "<job>!pause!<namespace>", one record per change: its value is "paused"
// or "resumed" and its seq (the change's instant, Unix milliseconds) is
// greater than every earlier change's. Records of pause changes are never
// pruned, so the newest one always holds the job's state.
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
	_, state, err := s.pauseState(ctx, job)
	if err != nil {
		return false, fmt.Errorf("reading the paused state of job %q: %w", job, err)
	}
	return state == statePaused || (state == "" && s.startsPaused(job)), nil
}

// pauseState returns the newest pause record's seq and state ("" if none),
// once the job's records of an earlier release are carried over. If that
// carry-over fails, the store's state is still the state, if it has one;
// with none, the state is unknown (the carry-over's error).
func (s *Scheduler) pauseState(ctx context.Context, job string) (int64, string, error) {
	cerr := s.carryOver(ctx, job)
	r, ok, err := latestRecord(ctx, s.l, s.pauseKey(job))
	switch {
	case err != nil:
		return 0, "", err
	case ok:
		if cerr != nil && ctx.Err() == nil {
			s.cfg.logger.Warn("carrying the job's metadata of an earlier release over failed; its pause state is read as recorded here", "job", job, "err", cerr)
		}
		return r.Seq, r.Value, nil
	}
	return 0, "", cerr
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
	s.carried.forget(job) // a change is judged against what the earlier release did last too
	last, cur, err := s.pauseState(ctx, job)
	if err != nil {
		return fmt.Errorf("reading the paused state of job %q: %w", job, err)
	}
	if cur == state || (cur == "" && !paused && !s.startsPaused(job)) {
		return nil
	}
	seq := max(seqOf(s.cfg.clock.Now()), last+1)
	for range 5 {
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		r, mine, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: key, Seq: seq, Value: state, Owner: owner})
		switch {
		case err != nil:
			return fmt.Errorf("recording job %q as %s: %w", job, state, err)
		case !mine: // another change at the same instant: go after it
			seq = r.Seq + 1
			continue
		}
		s.cfg.logger.Info("job "+state, "job", job, "namespace", s.cfg.namespace, "at", instantOf(seq))
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
