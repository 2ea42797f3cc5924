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
// The idempotency key is kept apart, in the record store (records.go),
// under the name "<job>!trigger!<key>": a log of the key's uses. A use is a
// record at an even seq (2n), created first-wins before the run is
// claimed; a refusal of that use (the job was at its MaxConcurrent limit,
// its claim was refused, nothing ran) is a record at the next, odd seq
// (2n+1), written by the use's owner, and frees the key: a retry with the
// same key tries again under the next use. A key whose newest record is a
// use is used — by a run, by a Trigger in progress, or by one that died
// between its use and the run's claim: at most one run per key, never two.
// Records are never changed or deleted, so a late create of an earlier
// attempt finds its place taken and changes nothing. The records expire
// with the history retention (default 7 days): once pruned the key is
// free again, so keys are unique within the retention, not forever.

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
//     more passed): then the error wraps
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
		var ferr error
		if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
			ferr = marker.refuse(ctx, s, err)
		}
		if errors.Is(err, backend.ErrOccurrenceOverlap) {
			s.emit(Event{Kind: EventClaim, Job: job, ScheduledAt: r.ScheduledAt, Result: ClaimOverlap, Err: err})
		}
		if ferr != nil {
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
	r.Token = leasehold.Token(g.Token)
	return r, nil
}

// triggerMarker is a won use of a trigger key: its record.
type triggerMarker struct {
	name  string
	seq   int64
	owner backend.Owner
}

// refuse records that the key's use was refused (cause; nothing ran),
// which frees the key. It is tried no longer than recordFinishWait after
// the caller's context ends. The error is the write's: the key then counts
// as used, or may (leasehold.ErrOutcomeIndeterminate).
func (m triggerMarker) refuse(ctx context.Context, s *Scheduler, cause error) error {
	fctx, cancel := ctxgrace.Outlive(ctx, recordFinishWait)
	defer cancel()
	_, mine, err := createRecord(fctx, s.l, backend.CreateRecordRequest{Name: m.name, Seq: m.seq + 1,
		Value: backend.CleanText("refused: "+cause.Error(), backend.MaxErrorLen), Owner: m.owner, Expires: s.recordExpiry()})
	if err == nil && !mine {
		err = fmt.Errorf("record %q seq %d holds another's record: %w", m.name, m.seq+1, errBadRecord)
	}
	if err != nil {
		s.cfg.logger.Warn("recording a trigger key's refusal failed; the key counts as used", "key record", m.name, "err", err)
	}
	return err
}

// recordFinishWait bounds a bookkeeping write that outlives its caller's
// context: the refusal of a trigger key's use. A backend that does not
// answer holds up a Trigger no longer than that.
const recordFinishWait = 3 * time.Second

// recordExpiry is when a record of history made now expires: after the
// retention, as runs do.
func (s *Scheduler) recordExpiry() time.Time { return s.cfg.clock.Now().Add(s.cfg.retention) }

// claimTriggerKey takes the next use of key: the record after the newest,
// if that one is a refusal. ErrClaimed (wrapped) if the key was used, or is
// being used right now.
func (s *Scheduler) claimTriggerKey(ctx context.Context, e *entry, key, what string) (triggerMarker, error) {
	name := e.job.Name + triggerInfix + key
	for range maxTriggerRefusals {
		last, ok, err := latestRecord(ctx, s.l, name)
		if err != nil {
			return triggerMarker{}, fmt.Errorf("%s: reading the key's uses: %w", what, err)
		}
		seq := int64(0)
		switch {
		case ok && last.Seq%2 == 0:
			return triggerMarker{}, fmt.Errorf("%s: the key was used before (by %s): %w", what, last.Owner.Instance, backend.ErrOccurrenceClaimed)
		case ok: // the newest use was refused: the key is free here
			seq = last.Seq + 1
		}
		// …and where an earlier release kept the key's uses (before an
		// upgrade, or during a rollback).
		r, used, err := legacyTriggerUsed(ctx, s.l, name)
		if err != nil {
			return triggerMarker{}, fmt.Errorf("%s: reading the key's uses by an earlier release: %w", what, err)
		}
		if used {
			return triggerMarker{}, fmt.Errorf("%s: the key was used before (by %s, %s, recorded by an earlier release): %w", what, r.Owner.Instance, r.State, backend.ErrOccurrenceClaimed)
		}
		if seq/2 >= maxTriggerRefusals {
			break
		}
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		_, mine, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: name, Seq: seq, Value: "used", Owner: owner, Expires: s.recordExpiry()})
		if err != nil {
			return triggerMarker{}, fmt.Errorf("%s: claiming the key: %w", what, err)
		}
		if mine {
			return triggerMarker{name: name, seq: seq, owner: owner}, nil
		}
		// Another use, or the refusal of the newest, came first: read again.
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
