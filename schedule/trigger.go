package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/ctxgrace"
)

// Triggers ("run now"). A triggered run is a run of the job itself in the
// ledger — same job name, so the same token sequence as the scheduled runs
// (its token is greater than every earlier one), recorded, listed, swept
// and reclaimed like any run — at the trigger's instant (backend.Instant of
// the scheduler's clock, moved on by a millisecond where it would meet an
// instant of the job's schedule or another trigger). Its SpecVersion is
// "trigger:<key>", which tells it from the scheduled runs.
//
// The idempotency key is kept apart, under the reserved job name
// "<job>!trigger!<key>": one marker record per attempt to use the key, at
// the epoch plus n milliseconds. A marker that ends succeeded names the run
// the key started; one that ends failed records a refusal (the job was at
// its MaxConcurrent limit, its claim was refused) and frees the key: a
// retry with the same key tries again under the next marker. A marker still
// running belongs to a Trigger in progress, or to one that died between
// the marker and the run's claim: the key counts as used (at most one run
// per key, never two). Markers are history: once the retention prunes them
// the key is free again, so keys are unique within the retention (default
// 7 days), not forever.

const (
	triggerInfix = backend.MetaSep + "trigger" + backend.MetaSep // reserved space: see backend.MetaSep
	// TriggerVersionPrefix starts the SpecVersion of a triggered run's
	// record; the trigger's key follows it.
	TriggerVersionPrefix = "trigger:"
	// maxTriggerKeyLen keeps TriggerVersionPrefix+key within the ledger's
	// 128 bytes of spec version.
	maxTriggerKeyLen = 128 - len(TriggerVersionPrefix)
	// maxTriggerRefusals bounds how often one key can be refused and retried.
	maxTriggerRefusals = 100
)

// IsTriggered reports whether a run record is a triggered run, and its key;
// for a scheduled run it returns "", false (never the run's spec version).
func IsTriggered(r backend.Run) (key string, ok bool) {
	key, ok = strings.CutPrefix(r.SpecVersion, TriggerVersionPrefix)
	if !ok {
		return "", false
	}
	return key, true
}

// Trigger runs job now, once across the cluster per idempotency key. See
// TriggerRun, which also returns the run it started.
func (s *Scheduler) Trigger(ctx context.Context, job, key string) error {
	_, err := s.TriggerRun(ctx, job, key)
	return err
}

// TriggerRun claims a run of job at the trigger's instant and starts it in
// the background (Shutdown waits for it), with heartbeats, outcome, OnLost
// and events as for a scheduled run; it returns the run as the job's
// function receives it (instant and fencing token). It is refused, with
// nothing run, when:
//   - the key was used before (the error wraps backend.ErrClaimed);
//   - the job is paused (ErrPaused; nothing is recorded, the key stays free);
//   - MaxConcurrent runs of the job are running (backend.ErrOverlap; the
//     key stays free, a retry with it may run later) — unless that refusal
//     could not be recorded in time (the caller's context ended and 3 s
//     more passed, or the key's lease ended): then the error wraps
//     ErrTriggerKeySpent instead, and the key counts as used.
//
// A pause stops triggers that start after it was recorded, as it stops
// claims. If the run's claim had an unknown outcome the error wraps
// leasehold.ErrIndeterminate and the key counts as used: the claim may
// stand, and then the sweeper runs it by the crash policy once its lease
// expires.
func (s *Scheduler) TriggerRun(ctx context.Context, job, key string) (Run, error) {
	if err := leasehold.ValidatePath("trigger key", key); err != nil {
		return Run{}, err
	}
	if len(key) > maxTriggerKeyLen {
		return Run{}, fmt.Errorf("%w: trigger key %.40q… is %d bytes, more than %d", leasehold.ErrInvalid, key, len(key), maxTriggerKeyLen)
	}
	if n := len(LedgerJob(s.cfg.namespace, job+triggerInfix+key)); n > backend.MaxKeyLen {
		return Run{}, fmt.Errorf("%w: trigger key %.40q… makes the ledger name of job %q's key records %d bytes, more than %d",
			leasehold.ErrInvalid, key, job, n, backend.MaxKeyLen)
	}
	s.mu.Lock()
	e := s.jobs[job]
	started := s.started
	s.mu.Unlock()
	if e == nil {
		return Run{}, fmt.Errorf("%w: %q", ErrJobNotFound, job)
	}
	if !started {
		return Run{}, fmt.Errorf("%w: scheduler not started", leasehold.ErrInvalid)
	}
	if s.loopCtx.Err() != nil {
		return Run{}, fmt.Errorf("%w: scheduler shut down", leasehold.ErrInvalid)
	}
	what := fmt.Sprintf("trigger %q of job %q", key, job)
	if _, _, refused := e.vc.state(); refused {
		return Run{}, fmt.Errorf("%w: %s refused: this instance's schedule version of the job was superseded (see the log); trigger it on an instance with the current config",
			leasehold.ErrInvalid, what)
	}
	if paused, err := s.readPaused(ctx, job); err != nil {
		return Run{}, fmt.Errorf("%s: %w", what, err)
	} else if paused {
		return Run{}, fmt.Errorf("%w: %s refused: the job is paused in namespace %q", ErrJobPaused, what, s.cfg.namespace)
	}
	marker, err := s.claimTriggerKey(ctx, e, key, what)
	if err != nil {
		return Run{}, err
	}
	r, owner, g, sent, err := s.claimTriggered(ctx, e, key)
	if err != nil {
		// A refusal frees the key; an unknown outcome does not (the claim
		// may stand, and the sweeper then runs it).
		out := backend.Outcome{State: backend.Failed, Error: "refused: " + err.Error()}
		if errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
			out = backend.Outcome{State: backend.Succeeded, Result: "claim outcome unknown: " + err.Error()}
		}
		ferr := marker.finish(ctx, s, out)
		if errors.Is(err, backend.ErrOccurrenceOverlap) {
			s.emit(Event{Kind: EventClaim, Job: job, ScheduledAt: r.ScheduledAt, Result: ClaimOverlap, Err: err})
		}
		if ferr != nil && out.State == backend.Failed {
			spent := "counts as used"
			if errors.Is(ferr, leasehold.ErrOutcomeIndeterminate) {
				spent = "may count as used"
			}
			return Run{}, fmt.Errorf("%w: %s was refused, nothing ran (%v), and the refusal could not be recorded, so key %q %s: trigger again with another key (%v)",
				ErrTriggerKeySpent, what, err, key, spent, ferr)
		}
		return Run{}, fmt.Errorf("%s: %w", what, err)
	}
	s.cfg.logger.Info("job triggered", "job", job, "trigger key", key, "at", r.ScheduledAt, "token", g.Token)
	s.emit(Event{Kind: EventClaim, Job: job, ScheduledAt: r.ScheduledAt, Token: leasehold.Token(g.Token), Attempt: 1, Result: ClaimWon})
	// The run, and its heartbeats, start before the key's outcome is
	// recorded: that write may be slow, and the won claim's lease must not
	// lapse unrenewed meanwhile (another instance would recover the run,
	// and this one would then start it on a dead lease beside it).
	s.runs.Add(1)
	e.inflight.Add(1)
	go func(r Run) {
		defer s.runs.Done()
		defer e.inflight.Add(-1)
		s.execute(e, r, owner, g, sent)
	}(r)
	_ = marker.finish(ctx, s, backend.Outcome{State: backend.Succeeded, // a failure leaves the key used, as it is
		Result: fmt.Sprintf("run at %s token %d", r.ScheduledAt.Format(time.RFC3339Nano), g.Token)})
	r.Token = leasehold.Token(g.Token)
	return r, nil
}

// triggerMarker is a won claim of a trigger key's marker record.
type triggerMarker struct {
	job      string
	at       time.Time
	owner    backend.Owner
	token    uint64
	leaseEnd time.Time // the marker's lease ends by then (its claim's send time + TTL)
}

// finish records the marker's outcome, retried as a run's outcome is
// (finishRun). A run that started (or whose claim's outcome is unknown)
// marks the key used, and so does a marker left running: that write is
// tried for recordFinishWait at most. A refusal frees the key only once it
// is written, so it is tried until the marker's lease ends (past which it
// cannot land), but no longer than recordFinishWait after the caller's
// context ends. The error is the write's: the key then counts as used, or
// may (leasehold.ErrOutcomeIndeterminate).
func (m triggerMarker) finish(ctx context.Context, s *Scheduler, out backend.Outcome) error {
	var (
		fctx   context.Context
		cancel context.CancelFunc
		until  time.Time
	)
	if out.State == backend.Failed {
		fctx, cancel = ctxgrace.Outlive(ctx, recordFinishWait)
		until = m.leaseEnd
	} else {
		fctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		until = time.Now().Add(recordFinishWait)
	}
	defer cancel()
	// ttl 0: no least try time beyond until, which bounds every try.
	err := finishRun(fctx, s.l, m.job, m.at, m.owner, m.token, out, until, 0)
	if err != nil {
		s.cfg.logger.Warn("recording a trigger key's outcome failed; the key counts as used", "marker", m.job, "err", err)
	}
	return err
}

// markerTTL is the least lease of a trigger key's marker.
const markerTTL = 5 * time.Minute

// claimTriggerKey claims the next free marker of key: the first marker not
// ending in a refusal. ErrClaimed (wrapped) if the key was used, or is
// being used right now.
func (s *Scheduler) claimTriggerKey(ctx context.Context, e *entry, key, what string) (triggerMarker, error) {
	name := e.job.Name + triggerInfix + key
	for n := range maxTriggerRefusals {
		at := epochStart.Add(time.Duration(n) * time.Millisecond)
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		// The marker is never heartbeated: its lease must outlast the run's
		// claim, however slow, or a refusal could not be recorded on it.
		g, sent, err := claimGrant(ctx, s.cfg.lease, s.l, backend.ClaimRequest{Job: name, ScheduledAt: at, Owner: owner,
			TTL: max(e.job.LeaseTTL, markerTTL), MaxEarly: s.cfg.tolerance})
		var claimed *backend.ClaimedError
		switch {
		case err == nil:
			return triggerMarker{job: name, at: at, owner: owner, token: g.Token, leaseEnd: sent.Add(g.TTL)}, nil
		case errors.As(err, &claimed) && claimed.Run.State == backend.Failed:
			continue // an earlier use of the key was refused: it is free
		case errors.As(err, &claimed):
			return triggerMarker{}, fmt.Errorf("%s: the key was used before (by %s, %s): %w", what, claimed.Run.Owner.Instance, claimed.Run.State, err)
		default:
			return triggerMarker{}, fmt.Errorf("%s: claiming the key: %w", what, err)
		}
	}
	return triggerMarker{}, fmt.Errorf("%w: %s: the key was refused %d times; use another", leasehold.ErrInvalid, what, maxTriggerRefusals)
}

// claimTriggered claims the triggered run: a run of the job at the
// trigger's instant, under the job's MaxConcurrent.
func (s *Scheduler) claimTriggered(ctx context.Context, e *entry, key string) (Run, backend.Owner, backend.Grant, time.Time, error) {
	at := backend.Instant(s.cfg.clock.Now())
	for range 10 {
		// Never on an instant of the schedule: that occurrence is the
		// scheduled run's.
		for e.spec.Next(at.Add(-time.Millisecond)).Equal(at) {
			at = at.Add(time.Millisecond)
		}
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		req := backend.ClaimRequest{
			Job: e.job.Name, ScheduledAt: at, SpecVersion: TriggerVersionPrefix + key, Owner: owner,
			TTL: e.job.LeaseTTL, MaxEarly: s.cfg.tolerance, MaxRunning: e.job.MaxConcurrent,
		}
		g, sent, err := claimGrant(ctx, s.cfg.lease, s.l, req)
		if errors.As(err, new(*backend.ClaimedError)) {
			at = at.Add(time.Millisecond) // another trigger took this instant
			continue
		}
		if err != nil {
			return Run{Job: e.job.Name, ScheduledAt: at}, owner, g, sent, err
		}
		return Run{Job: e.job.Name, ScheduledAt: at, Attempt: 1, Instance: s.cfg.instance}, owner, g, sent, nil
	}
	return Run{}, backend.Owner{}, backend.Grant{}, time.Time{}, fmt.Errorf("%w: no free instant near %s (too many triggers in one millisecond)", backend.ErrOccurrenceOverlap, at.Format(time.RFC3339Nano))
}

// lastScheduled returns, for catch-up, the instant of the job's latest run
// that was not triggered, when the high-water mark hw is a triggered run's.
// It reads the history from hw down to since (the misfire window's start;
// the window is shorter than the retention, so runs in it are still in the
// history) and returns since if no scheduled run is in it. If the history
// cannot be read, or holds too many triggers to page through, it returns
// hw: catch-up then skips the occurrences before hw rather than risk
// running ones that were skipped on purpose (paused, at the limit).
func (s *Scheduler) lastScheduled(ctx context.Context, e *entry, hw, since time.Time) time.Time {
	const page = 100
	before := hw.Add(time.Millisecond)
	for range 10 {
		runs, err := s.l.ListRuns(ctx, backend.RunFilter{Job: e.job.Name, Since: since, Before: before, Limit: page})
		if err != nil {
			s.cfg.logger.Warn("reading the history for catch-up failed; catching up after the latest trigger only", "job", e.job.Name, "err", err)
			return hw
		}
		for _, r := range runs { // newest first
			if _, triggered := IsTriggered(r); !triggered {
				return r.ScheduledAt
			}
		}
		if len(runs) < page {
			return since
		}
		before = runs[len(runs)-1].ScheduledAt
	}
	s.cfg.logger.Warn("too many triggered runs to find the latest scheduled one; catching up after the latest trigger only", "job", e.job.Name)
	return hw
}
