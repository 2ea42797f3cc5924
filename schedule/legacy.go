package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Records of earlier releases. Before the record store, the scheduler kept
// a job's metadata as runs of the ledger under the same names (a job's
// name, backend.MetaSep, the kind). This file is all that reads them; it
// goes when no database written by those releases needs carrying over
// (docs/records.md, "Upgrading").
//
// carryOver copies what the scheduler reads at once (the schedule versions
// and the pause state) into the record store, and then fences the earlier
// release out: it records the job as paused where that release reads its
// state, so that an instance of the earlier release still running beside
// this one (a rolling upgrade) claims nothing of the job and refuses its
// triggers, instead of acting on metadata it can no longer see (a pause, a
// new version, a used trigger key). A record named "<job>!records" keeps
// that release's marks as they stood then (carriedMark); it is done again
// when they moved (a rollback). What is read rarely is read through when
// needed: a superseded mark (legacySuperseded), a trigger key's use
// (legacyTriggerUsed), a retried attempt's failure (ReadAttempt).

const carriedSuffix = backend.MetaSep + "records"

// fenceWait bounds the pause of the earlier release's fence.
const fenceWait = 10 * time.Second

// carriedMark is the value of a "<job>!records" record: the earlier
// release's high-water marks of the job's pause state and versions (Unix
// ms, 0 for none) as they stood once the job was carried over and fenced.
// A Scheduler that finds them moved on knows that release acted on the job
// since (a rollback, or an instance of it that learnt the job later), and
// carries over and fences again.
type carriedMark struct {
	Pause   int64  `json:"pause_ms"`
	Version int64  `json:"version_ms"`
	By      string `json:"by"`
}

// fenceOwnerPrefix starts the owner instance of a fence's run, which is how
// a fence is told from a pause made by the earlier release.
const fenceOwnerPrefix = "leasehold-fence/"

// carryOver carries job's metadata of an earlier release over and fences
// that release off, unless the job's newest "<job>!records" says it was
// done and that release has written nothing for the job since.
func (s *Scheduler) carryOver(ctx context.Context, job string) error {
	if s.carried.has(job) {
		return nil
	}
	pkey, vkey, marker := s.pauseKey(job), job+versionSuffix, job+carriedSuffix
	// The earlier release's marks first, then the record of the last
	// carry-over: a carry-over that ended in between is seen whole.
	phw, pstate, err := s.l.HighWater(ctx, pkey)
	if err != nil {
		return fmt.Errorf("reading job %q's pause state of an earlier release: %w", job, err)
	}
	vhw, _, err := s.l.HighWater(ctx, vkey)
	if err != nil {
		return fmt.Errorf("reading job %q's schedule version of an earlier release: %w", job, err)
	}
	last, ok, err := latestRecord(ctx, s.l, marker)
	if err != nil {
		return err
	}
	var done carriedMark
	if ok {
		if err := json.Unmarshal([]byte(last.Value), &done); err != nil {
			return fmt.Errorf("record %q seq %d (%.40q): %w", last.Name, last.Seq, last.Value, errBadRecord)
		}
		if done.Pause == millis(phw) && done.Version == millis(vhw) {
			s.carried.add(job)
			return nil
		}
	}
	self := func() backend.Owner { return backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()} }
	if millis(vhw) != done.Version {
		versions, err := legacySpans(ctx, s.l, job)
		if err != nil {
			return fmt.Errorf("reading job %q's schedule versions of an earlier release: %w", job, err)
		}
		for _, v := range versions {
			o := v.owner
			if o.Nonce.IsZero() {
				o = self()
			}
			req := backend.CreateRecordRequest{Name: vkey, Seq: seqOf(v.from), Value: versionValue{Version: v.version, Spec: v.spec, Recorded: v.recorded}.encode(), Owner: o}
			if _, _, err := createRecord(ctx, s.l, req); err != nil {
				return fmt.Errorf("carrying job %q's schedule version %s over: %w", job, v.version, err)
			}
		}
	}
	if millis(phw) > done.Pause {
		fence, err := s.isFence(ctx, pkey, phw)
		if err != nil {
			return err
		}
		if !fence { // a change made with the earlier release: it is the newer, by its instant
			if _, _, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: pkey, Seq: seqOf(phw), Value: pstate, Owner: self()}); err != nil {
				return fmt.Errorf("carrying job %q's pause state over: %w", job, err)
			}
		}
	}
	if pstate != statePaused {
		if phw, err = s.fenceEarlierRelease(ctx, job, phw); err != nil {
			return err
		}
	}
	v, _ := json.Marshal(carriedMark{Pause: millis(phw), Version: millis(vhw), By: s.cfg.instance})
	seq := seqOf(s.cfg.clock.Now())
	if ok {
		seq = max(seq, last.Seq+1)
	}
	if _, _, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: marker, Seq: seq, Value: string(v), Owner: self()}); err != nil {
		return fmt.Errorf("marking job %q carried over: %w", job, err)
	}
	s.carried.add(job)
	return nil
}

// millis is t in Unix milliseconds, 0 for the zero time.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// isFence reports whether the earlier release's pause run of job at at is
// a fence (a Scheduler of this release wrote it), not a pause made with
// that release. A run pruned since is no fence: a carry-over records its
// fence at once, so a fence that old was carried over.
func (s *Scheduler) isFence(ctx context.Context, pkey string, at time.Time) (bool, error) {
	r, err := s.l.GetRun(ctx, pkey, at)
	switch {
	case errors.Is(err, backend.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the pause run of an earlier release %s: %w", backend.FormatOccurrence(pkey, at), err)
	}
	return strings.HasPrefix(r.Owner.Instance, fenceOwnerPrefix), nil
}

// carriedJobs is the set of jobs carried over, behind a lock of its own:
// carryOver runs in an entry's start-up, which Remove waits for holding
// the Scheduler's.
type carriedJobs struct {
	mu   sync.Mutex
	jobs map[string]bool
}

func (c *carriedJobs) has(job string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobs[job]
}

func (c *carriedJobs) add(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]bool{}
	}
	c.jobs[job] = true
}

// fenceEarlierRelease records job as paused where an earlier release reads
// its pause state: a run of "<job>!pause!<namespace>" after hw, owned by
// fenceOwnerPrefix + this instance, finished. It returns the fence's
// instant.
func (s *Scheduler) fenceEarlierRelease(ctx context.Context, job string, hw time.Time) (time.Time, error) {
	key := s.pauseKey(job)
	at := backend.Instant(s.cfg.clock.Now())
	if !at.After(hw) {
		at = hw.Add(time.Millisecond)
	}
	instance := fenceOwnerPrefix + s.cfg.instance
	if len(instance) > backend.MaxInstanceLen {
		instance = instance[:backend.MaxInstanceLen]
	}
	for range 5 {
		owner := backend.Owner{Instance: strings.ToValidUTF8(instance, ""), Nonce: backend.NewNonce()}
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
			return time.Time{}, fmt.Errorf("fencing job %q off for an earlier release: %w", job, err)
		}
		s.cfg.logger.Info("job fenced off for an earlier release: its instances read it as paused (docs/records.md)", "job", job, "namespace", s.cfg.namespace)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fenceWait)
		defer cancel()
		_ = s.l.Finish(fctx, backend.FinishRequest{Job: key, ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: "fence: the job's metadata is in the record store"}})
		return at, nil
	}
	return time.Time{}, fmt.Errorf("fencing job %q off for an earlier release: too many concurrent changes", job)
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
