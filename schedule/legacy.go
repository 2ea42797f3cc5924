package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// fenceSuffix names the records of the fences this release wrote for a
// job (seq: the fence run's instant). A fence is recorded here before its
// run is claimed, so that it is told from a pause made with the earlier
// release for good, also once the retention pruned its run.
const fenceSuffix = backend.MetaSep + "fence"

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

// fenceOwnerPrefix starts the owner instance of a fence's run, for people
// reading the ledger; fences are told by their records (fenceSuffix).
const fenceOwnerPrefix = "leasehold-fence/"

// carryOver carries job's metadata of an earlier release over and fences
// that release off, unless the job's newest "<job>!records" says it was
// done and that release has written nothing for the job since.
func (s *Scheduler) carryOver(ctx context.Context, job string) error {
	if s.carried.has(job) {
		return nil
	}
	pkey, vkey, marker := s.pauseKey(job), job+versionSuffix, job+carriedSuffix
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
	// Fence first, then copy: a change made with the earlier release
	// before the fence landed is read below. The mark kept is the one read
	// before the changes are: one made after it moves the mark on, for the
	// next carry-over.
	mark, err := s.fenceAndCarry(ctx, job, done.Pause, phw, pstate)
	if err != nil {
		return err
	}
	phw = mark
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

// fenceAndCarry fences job off for the earlier release until that
// release's pause mark reads paused, then carries over its newest pause
// change after the instant after (Unix ms), and returns the mark it read
// last (a change made after that read moves the mark past it). origHW and
// origState are the mark read before this carry-over fenced anything.
func (s *Scheduler) fenceAndCarry(ctx context.Context, job string, after int64, origHW time.Time, origState string) (time.Time, error) {
	pkey := s.pauseKey(job)
	hw, state := origHW, origState
	for range 5 {
		if state != statePaused {
			if err := s.fenceEarlierRelease(ctx, job, hw); err != nil {
				return time.Time{}, err
			}
		}
		var err error
		if hw, state, err = s.l.HighWater(ctx, pkey); err != nil {
			return time.Time{}, fmt.Errorf("reading job %q's pause state of an earlier release: %w", job, err)
		}
		if state != statePaused {
			continue // a change of the earlier release after the fence (or over it): fence again
		}
		at, st, changed, err := s.legacyPauseChange(ctx, job, after, []backend.Run{
			{ScheduledAt: hw, SpecVersion: state}, {ScheduledAt: origHW, SpecVersion: origState},
		})
		if err != nil {
			return time.Time{}, err
		}
		if changed { // made with the earlier release: the newer change, by its instant
			if err := s.carryPauseChange(ctx, pkey, seqOf(at), st); err != nil {
				return time.Time{}, fmt.Errorf("carrying job %q's pause state over: %w", job, err)
			}
		}
		return hw, nil
	}
	return time.Time{}, fmt.Errorf("fencing job %q off for an earlier release: its pause state there keeps changing", job)
}

// carryPauseChange records state, a change made with the earlier release
// at seq and not carried over before, in the store. If seq is taken by a
// record of another change (this release's records and that release's
// changes both count on from a mark that may be ahead of the clocks), it
// goes after the newest record: it was made after the last look, and a
// change of this release is judged against it (setPaused looks first).
func (s *Scheduler) carryPauseChange(ctx context.Context, pkey string, seq int64, state string) error {
	for range 5 {
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		r, mine, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: pkey, Seq: seq, Value: state, Owner: owner})
		switch {
		case err != nil:
			return err
		case mine || r.Value == state:
			return nil // carried, or the same change carried by another
		}
		last, ok, err := latestRecord(ctx, s.l, pkey)
		if err != nil {
			return err
		}
		if ok && last.Value == state && last.Seq >= seq {
			return nil
		}
		seq = max(seq, last.Seq) + 1
	}
	return errors.New("too many concurrent changes")
}

// legacyPauseChange returns the newest change of job's pause state made
// with the earlier release after the instant after (Unix ms), among its
// runs under "<job>!pause!<namespace>" and, for those whose run the
// retention pruned, the high-water marks read (marks). A listed run is a
// fence if its owner is one (fenceOwnerPrefix); a mark whose run is gone
// is one if a fence was recorded at its instant ("<job>!fence"), which
// every fence is before its run is claimed.
func (s *Scheduler) legacyPauseChange(ctx context.Context, job string, after int64, marks []backend.Run) (time.Time, string, bool, error) {
	runs, err := legacyRuns(ctx, s.l, s.pauseKey(job), after)
	if err != nil {
		return time.Time{}, "", false, fmt.Errorf("reading job %q's pause changes of an earlier release: %w", job, err)
	}
	fences, err := s.fences(ctx, job)
	if err != nil {
		return time.Time{}, "", false, err
	}
	fence := map[int64]bool{}
	for _, r := range runs {
		fence[millis(r.ScheduledAt)] = strings.HasPrefix(r.Owner.Instance, fenceOwnerPrefix)
	}
	for _, m := range marks {
		if _, listed := fence[millis(m.ScheduledAt)]; !listed && !m.ScheduledAt.IsZero() { // its run was pruned
			runs = append(runs, m)
			fence[millis(m.ScheduledAt)] = fences[seqOf(m.ScheduledAt)]
		}
	}
	slices.SortFunc(runs, func(a, b backend.Run) int { return b.ScheduledAt.Compare(a.ScheduledAt) })
	for _, r := range runs { // newest first
		if millis(r.ScheduledAt) <= after {
			break
		}
		if !fence[millis(r.ScheduledAt)] {
			return r.ScheduledAt, r.SpecVersion, true, nil
		}
	}
	return time.Time{}, "", false, nil
}

// fences returns the seqs (instants) of the fences recorded for job.
func (s *Scheduler) fences(ctx context.Context, job string) (map[int64]bool, error) {
	out := map[int64]bool{}
	req := backend.ListRecordsRequest{Name: job + fenceSuffix, Limit: backend.DefaultRecordLimit}
	for {
		rs, err := s.l.ListRecords(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("reading job %q's fences: %w", job, err)
		}
		for _, r := range rs {
			out[r.Seq] = true
		}
		if len(rs) < req.Limit || rs[len(rs)-1].Seq == 0 {
			return out, nil
		}
		req.Before = rs[len(rs)-1].Seq
	}
}

// fenceEarlierRelease records job as paused where an earlier release reads
// its pause state: a run of "<job>!pause!<namespace>" after hw, recorded
// first as a fence ("<job>!fence"), then claimed, owned by
// fenceOwnerPrefix + this instance, and finished.
func (s *Scheduler) fenceEarlierRelease(ctx context.Context, job string, hw time.Time) error {
	key := s.pauseKey(job)
	at := backend.Instant(s.cfg.clock.Now())
	if !at.After(hw) {
		at = hw.Add(time.Millisecond)
	}
	instance := fenceOwnerPrefix + s.cfg.instance
	if len(instance) > backend.MaxInstanceLen {
		instance = strings.ToValidUTF8(instance[:backend.MaxInstanceLen], "")
	}
	for range 5 {
		owner := backend.Owner{Instance: instance, Nonce: backend.NewNonce()}
		fence := backend.CreateRecordRequest{Name: job + fenceSuffix, Seq: seqOf(at), Value: "fence", Owner: owner}
		if _, _, err := createRecord(ctx, s.l, fence); err != nil {
			return fmt.Errorf("recording a fence of job %q for an earlier release: %w", job, err)
		}
		req := backend.ClaimRequest{
			Job: key, ScheduledAt: at, SpecVersion: statePaused, Owner: owner,
			TTL: time.Minute, MaxEarly: 100 * 365 * 24 * time.Hour, // later than the mark, whatever the clocks say
		}
		g, err := s.l.Claim(ctx, req)
		var claimed *backend.ClaimedError
		switch {
		case errors.As(err, &claimed) && strings.HasPrefix(claimed.Run.Owner.Instance, fenceOwnerPrefix):
			return nil // another instance's fence at the same instant
		case errors.As(err, &claimed):
			// A change made with the earlier release holds the instant:
			// the fence recorded for it is none. Withdrawn, best effort:
			// while the change's run is kept its owner says what it is.
			_ = s.l.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: fence.Name, Seq: fence.Seq, Owner: owner})
			at = at.Add(time.Millisecond)
			continue
		case err != nil:
			return fmt.Errorf("fencing job %q off for an earlier release: %w", job, err)
		}
		s.cfg.logger.Info("job fenced off for an earlier release: its instances read it as paused (docs/records.md)", "job", job, "namespace", s.cfg.namespace)
		// Finished under the caller's context: a fence left running is a
		// fence all the same (the earlier release reads the mark).
		_ = s.l.Finish(ctx, backend.FinishRequest{Job: key, ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: "fence: the job's metadata is in the record store"}})
		return nil
	}
	return fmt.Errorf("fencing job %q off for an earlier release: too many concurrent changes", job)
}

// recheckEvery is how long a Scheduler trusts its last look at a job's
// metadata of the earlier release: then it compares the marks again (three
// reads), so that a change made with that release's tools while this one
// runs (docs/records.md, "What this does not cover") is carried over
// within it.
const recheckEvery = time.Minute

// carriedJobs is the set of jobs carried over, with when, behind a lock of
// its own: carryOver runs in an entry's start-up, which Remove waits for
// holding the Scheduler's.
type carriedJobs struct {
	mu   sync.Mutex
	jobs map[string]time.Time
}

func (c *carriedJobs) has(job string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.jobs[job]
	return ok && time.Since(at) < recheckEvery
}

func (c *carriedJobs) add(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]time.Time{}
	}
	c.jobs[job] = time.Now()
}

// forget makes the next carryOver of job look again.
func (c *carriedJobs) forget(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, job)
}

// legacyRuns returns the runs an earlier release kept under name, newest
// first, paging the listing until it reaches the instant after (Unix ms;
// 0: all of them). Runs at or before after may be among them.
func legacyRuns(ctx context.Context, l backend.Ledger, name string, after int64) ([]backend.Run, error) {
	var out []backend.Run
	f := backend.RunFilter{Job: name, Limit: backend.DefaultRunLimit}
	for {
		rs, err := l.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
		if len(rs) < f.Limit || millis(rs[len(rs)-1].ScheduledAt) <= after {
			return out, nil
		}
		f.Before = rs[len(rs)-1].ScheduledAt
	}
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
	rs, err := legacyRuns(ctx, l, job+versionSuffix, 0)
	if err != nil {
		return nil, err
	}
	var out []legacySpan
	for _, r := range rs {
		out = append(out, legacySpan{from: r.ScheduledAt, recorded: r.ClaimedAt, version: r.SpecVersion, spec: r.Result, owner: r.Owner})
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
