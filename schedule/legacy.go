package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Records of earlier releases. Before the record store, the scheduler kept
// a job's metadata as runs of the ledger under the same names (a job's
// name, backend.MetaSep, the kind). This file is all that reads them; it
// goes when no database written by those releases needs carrying over
// (docs/records.md, "Upgrading").
//
// carryOver copies, once per job and backend, what the scheduler reads at
// once (the schedule versions and the pause state) into the record store,
// and then fences the earlier release out: it records the job as paused
// where that release reads its state, so that an instance of the earlier
// release still running beside this one (a rolling upgrade) claims nothing
// of the job and refuses its triggers, instead of acting on metadata it
// can no longer see (a pause, a new version, a used trigger key). A job
// that release never recorded needs neither. What is read rarely is read
// through when needed: a superseded mark (legacySuperseded), a trigger
// key's use (legacyTriggerUsed), a retried attempt's failure (ReadAttempt).
// A record named "<job>!records" says the job was carried over.

const carriedSuffix = backend.MetaSep + "records"

// fenceWait bounds the pause of the earlier release's fence.
const fenceWait = 10 * time.Second

// carryOver carries job's metadata of an earlier release over, once.
func (s *Scheduler) carryOver(ctx context.Context, job string) error {
	s.mu.Lock()
	done := s.carried[job]
	s.mu.Unlock()
	if done {
		return nil
	}
	marker := job + carriedSuffix
	if _, ok, err := latestRecord(ctx, s.l, marker); err != nil || ok {
		if ok {
			s.markCarried(job)
		}
		return err
	}
	// The earlier release's pause state first, then this release's: if it
	// is a fence already (another instance carrying the job over), that
	// instance's copy of the state came before it, and is read below.
	pkey := s.pauseKey(job)
	phw, pstate, err := s.l.HighWater(ctx, pkey)
	if err != nil {
		return fmt.Errorf("reading job %q's pause state of an earlier release: %w", job, err)
	}
	versions, err := legacySpans(ctx, s.l, job)
	if err != nil {
		return fmt.Errorf("reading job %q's schedule versions of an earlier release: %w", job, err)
	}
	self := func() backend.Owner { return backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()} }
	if len(versions) > 0 || !phw.IsZero() {
		for _, v := range versions {
			o := v.owner
			if o.Nonce.IsZero() {
				o = self()
			}
			req := backend.CreateRecordRequest{Name: job + versionSuffix, Seq: seqOf(v.from), Value: versionValue{Version: v.version, Spec: v.spec, Recorded: v.recorded}.encode(), Owner: o}
			if _, _, err := createRecord(ctx, s.l, req); err != nil {
				return fmt.Errorf("carrying job %q's schedule version %s over: %w", job, v.version, err)
			}
		}
		if _, ok, err := latestRecord(ctx, s.l, pkey); err != nil {
			return err
		} else if !ok {
			// The state as the earlier release left it ("" if never
			// recorded: StartPaused decides), so that the fence below is
			// never taken for it.
			seq := int64(0)
			if !phw.IsZero() {
				seq = seqOf(phw)
			}
			if _, _, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: pkey, Seq: seq, Value: pstate, Owner: self()}); err != nil {
				return fmt.Errorf("carrying job %q's pause state over: %w", job, err)
			}
		}
		if pstate != statePaused {
			if err := s.fenceEarlierRelease(ctx, job, phw); err != nil {
				return err
			}
		}
	}
	if _, _, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: marker, Value: "carried over by " + s.cfg.instance, Owner: self()}); err != nil {
		return fmt.Errorf("marking job %q carried over: %w", job, err)
	}
	s.markCarried(job)
	return nil
}

func (s *Scheduler) markCarried(job string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.carried[job] = true
}

// fenceEarlierRelease records job as paused where an earlier release reads
// its pause state: a run of "<job>!pause!<namespace>" after hw, finished.
func (s *Scheduler) fenceEarlierRelease(ctx context.Context, job string, hw time.Time) error {
	key := s.pauseKey(job)
	at := backend.Instant(s.cfg.clock.Now())
	if !at.After(hw) {
		at = hw.Add(time.Millisecond)
	}
	for range 5 {
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		req := backend.ClaimRequest{
			Job: key, ScheduledAt: at, SpecVersion: statePaused, Owner: owner,
			TTL: time.Minute, MaxEarly: 100 * 365 * 24 * time.Hour, // later than the mark, whatever the clocks say
		}
		g, err := s.l.Claim(ctx, req)
		var claimed *backend.ClaimedError
		switch {
		case errors.As(err, &claimed): // another change at the same instant: go after it
			at = at.Add(time.Millisecond)
			continue
		case err != nil:
			return fmt.Errorf("fencing job %q off for an earlier release: %w", job, err)
		}
		s.cfg.logger.Info("job carried over to the record store; instances of an earlier release now read it as paused", "job", job, "namespace", s.cfg.namespace)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fenceWait)
		defer cancel()
		_ = s.l.Finish(fctx, backend.FinishRequest{Job: key, ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: "fence: carried over to the record store by " + s.cfg.instance}})
		return nil
	}
	return fmt.Errorf("fencing job %q off for an earlier release: too many concurrent changes", job)
}

// legacySpan is a schedule version as an earlier release recorded it.
type legacySpan struct {
	from, recorded time.Time
	version, spec  string
	owner          backend.Owner
}

// legacySpans returns job's schedule versions as an earlier release kept
// them (runs of "<job>!version"), newest first; when that history was
// pruned, the high-water mark's version alone.
func legacySpans(ctx context.Context, l backend.Ledger, job string) ([]legacySpan, error) {
	var out []legacySpan
	f := backend.RunFilter{Job: job + versionSuffix, Limit: backend.DefaultRunLimit}
	for {
		rs, err := l.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			out = append(out, legacySpan{from: r.ScheduledAt, recorded: r.ClaimedAt, version: r.SpecVersion, spec: r.Result, owner: r.Owner})
		}
		if len(rs) < f.Limit {
			break
		}
		f.Before = rs[len(rs)-1].ScheduledAt
	}
	if len(out) == 0 {
		hw, ver, err := l.HighWater(ctx, job+versionSuffix)
		if err != nil || hw.IsZero() {
			return nil, err
		}
		out = append(out, legacySpan{from: hw, version: ver})
	}
	return out, nil
}

// legacySuperseded reports whether an earlier release marked version of
// job superseded, carrying the mark over if it did.
func (s *Scheduler) legacySuperseded(ctx context.Context, l backend.Ledger, job, version string) (bool, error) {
	name := supersededKey(job, version)
	hw, by, err := l.HighWater(ctx, name)
	if err != nil || hw.IsZero() {
		return false, err
	}
	if s != nil {
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		if _, _, err := createRecord(ctx, l, backend.CreateRecordRequest{Name: name, Seq: seqOf(hw), Value: by, Owner: owner}); err != nil {
			s.cfg.logger.Warn("carrying a superseded mark of an earlier release over failed; it is read from there again", "job", job, "version", version, "err", err)
		}
	}
	return true, nil
}

// legacyTriggerUsed reports whether an earlier release used trigger key
// name (a marker not ending in a refusal) and, if so, who.
func legacyTriggerUsed(ctx context.Context, l backend.Ledger, name string) (backend.Run, bool, error) {
	rs, err := l.ListRuns(ctx, backend.RunFilter{Job: name, Limit: maxTriggerRefusals})
	if err != nil {
		return backend.Run{}, false, err
	}
	for _, r := range rs {
		if r.State != backend.Failed {
			return r, true, nil
		}
	}
	return backend.Run{}, false, nil
}
