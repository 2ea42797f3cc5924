package schedule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// Schedule versions. Each job's spec has a version (a hash). The ledger
// keeps, under the reserved job name "<job>!version", one record per version
// switch: ScheduledAt is the instant from which the version applies and
// SpecVersion the version. The first version of a job applies from the
// epoch; a later one from the first of its instants at least the settle time
// after it was registered, so instances still running the previous version
// see the switch before it arrives. An occurrence at instant t may be
// claimed only by an instance whose version is the one applying at t.
//
// Versions only move forward. A version switches in once: when a version
// replaces others, each replaced one is marked superseded by a claim under
// "<job>!superseded!<version>", whose high-water mark prune never lowers.
// An instance whose version was superseded (its mark exists, or the
// history shows it followed by another) refuses to record it again: it logs
// an error, claims nothing under it, its JobStatus says VersionRefused, and
// it states the refusal for other instances to show (refusal.go).
// Restarting an instance with an old config therefore cannot take a job
// back from the newer config. To return to an earlier schedule on purpose,
// give the job a new Revision: that is a new version.

const (
	// Record names (records.go): a version record's seq is the instant
	// its version applies from, its value the version and spec
	// (versionValue); a superseded mark's seq is the instant of the
	// version that replaced it, its value that version.
	versionSuffix   = backend.MetaSep + "version"
	supersededInfix = backend.MetaSep + "superseded" + backend.MetaSep
)

// supersededKey is the ledger name whose high-water mark records that
// version of job was replaced.
func supersededKey(job, version string) string { return job + supersededInfix + version }

// epochStart is where a job's first version applies from.
var epochStart = time.UnixMilli(1).UTC()

type span struct {
	from    time.Time
	version string
}

// spans returns the version switches of a job, oldest first, with runs of
// one version collapsed to their first record.
func (s *Scheduler) spans(ctx context.Context, e *entry) ([]span, error) {
	sp, err := readSpans(ctx, s.l, e.job.Name)
	return asSpec(sp, e.spec), err
}

func readSpans(ctx context.Context, l backend.Ledger, job string) ([]span, error) {
	vs, err := ReadVersions(ctx, l, job)
	var out []span
	for i := len(vs) - 1; i >= 0; i-- { // newest first
		out = appendSpan(out, span{vs[i].From, vs[i].Version})
	}
	return out, err
}

// VersionRecord is one recorded switch of a job's schedule version.
type VersionRecord struct {
	From     time.Time // the instant the version applies from (a job's first: the epoch + 1 ms)
	Version  string
	Spec     string    // the schedule it names ("" if an earlier release's history was pruned)
	Recorded time.Time // when it was recorded (zero if unknown)
}

// ReadVersions returns the newest 20 recorded version switches of job,
// newest first, from l, which must be confined to the job's namespace
// (NamespaceLedger); for a job whose records an earlier release kept and
// no Scheduler carried over yet, those.
func ReadVersions(ctx context.Context, l backend.Ledger, job string) ([]VersionRecord, error) {
	recs, err := l.ListRecords(ctx, backend.ListRecordsRequest{Name: job + versionSuffix, Limit: 20})
	if err != nil {
		return nil, err
	}
	var out []VersionRecord
	if len(recs) == 0 {
		legacy, err := legacySpans(ctx, l, job)
		for _, v := range legacy[:min(len(legacy), 20)] {
			out = append(out, VersionRecord{From: v.from, Version: v.version, Spec: v.spec, Recorded: v.recorded})
		}
		return out, err
	}
	for _, r := range recs {
		v, err := decodeVersion(r)
		if err != nil {
			return nil, err
		}
		out = append(out, VersionRecord{From: instantOf(r.Seq), Version: v.Version, Spec: v.Spec, Recorded: v.Recorded})
	}
	return out, nil
}

// appendSpan appends x to sp, oldest first, unless it continues sp's last
// version.
func appendSpan(sp []span, x span) []span {
	if len(sp) > 0 && sp[len(sp)-1].version == x.version {
		return sp
	}
	return append(sp, x)
}

// asSpec returns sp with the versions that name spec's schedule (its
// legacy hash) written as spec's version, and runs of one version merged.
func asSpec(sp []span, spec *Spec) []span {
	var out []span
	for _, x := range sp {
		if spec.same(x.version) {
			x.version = spec.Version()
		}
		if len(out) > 0 && out[len(out)-1].version == x.version {
			continue
		}
		out = append(out, x)
	}
	return out
}

// superseded reports whether version was once job's and a later version
// replaced it, given the job's spans sp. With no version recorded at all
// (a new job, or a backend that lost its data) nothing is superseded.
func (s *Scheduler) superseded(ctx context.Context, job, version string, sp []span) (bool, error) {
	return superseded(ctx, s, s.l, job, version, sp)
}

// superseded is Scheduler.superseded for s, or for a tool (s nil: a mark
// of an earlier release is read, not carried over).
func superseded(ctx context.Context, s *Scheduler, l backend.Ledger, job, version string, sp []span) (bool, error) {
	if len(sp) == 0 || sp[len(sp)-1].version == version {
		return false, nil
	}
	for _, x := range sp[:len(sp)-1] {
		if x.version == version {
			return true, nil
		}
	}
	if _, ok, err := latestRecord(ctx, l, supersededKey(job, version)); err != nil || ok {
		return ok, err
	}
	return s.legacySuperseded(ctx, l, job, version)
}

// VersionState is how a schedule version stands in a job's ledger.
type VersionState struct {
	// Current is the job's newest recorded version ("" if none) and From
	// the instant from which it applies (it may lie ahead: a switch settles
	// before it takes effect).
	Current string
	From    time.Time
	// Superseded: the version asked about was the job's once and a later
	// one replaced it; a Scheduler refuses to record it again.
	Superseded bool
}

// ReadVersionState reports how spec's version stands among job's recorded
// versions in l, which must be confined to the job's namespace (see
// NamespaceLedger). Tools use it to show a refused version without running
// a Scheduler. A record of spec's legacy version counts as spec's.
func ReadVersionState(ctx context.Context, l backend.Ledger, job string, spec *Spec) (VersionState, error) {
	sp, err := readSpans(ctx, l, job)
	if err != nil || len(sp) == 0 {
		return VersionState{}, err
	}
	sp = asSpec(sp, spec)
	sup, err := superseded(ctx, nil, l, job, spec.Version(), sp)
	if err != nil {
		return VersionState{}, err
	}
	last := sp[len(sp)-1]
	return VersionState{Current: last.version, From: last.from, Superseded: sup}, nil
}

// versionCache keeps a job's spans between claims, so that an occurrence
// costs no extra round trip. It is refreshed at least every
// (settle − tolerance)/2: a switch is recorded at least settle before it
// applies, so an instance still running the old version sees it before it
// could claim an instant under it (assuming clocks agree within the rest of
// the margin).
type versionCache struct {
	mu       sync.Mutex
	spans    []span
	fetched  time.Time       // local monotonic
	recorded bool            // this entry's version is recorded (ensureVersion succeeded), or refused
	refused  bool            // this entry's version was superseded; ensureVersion refused to record it
	marked   map[string]bool // versions this entry marked superseded (or found marked)
}

func (s *Scheduler) refreshEvery() time.Duration { return (s.cfg.settle - s.cfg.tolerance) / 2 }

// ensureVersion records e's version as the job's current one if it is not.
// It runs when the job is registered: the newest registration of a version
// never recorded before wins from its switch instant on. A version that was
// superseded is refused (see the top of this file): an instance started
// with an old config must not take the job back.
func (s *Scheduler) ensureVersion(ctx context.Context, e *entry) error {
	if err := s.carryOver(ctx, e.job.Name); err != nil {
		return err
	}
	sp, err := s.spans(ctx, e)
	if err != nil {
		return err
	}
	if len(sp) > 0 && sp[len(sp)-1].version == e.spec.Version() {
		e.vc.set(sp, true)
		return nil
	}
	sup, err := s.superseded(ctx, e.job.Name, e.spec.Version(), sp)
	if err == nil && !sup && e.spec.Legacy() != "" {
		sup, err = s.superseded(ctx, e.job.Name, e.spec.Legacy(), sp)
	}
	if err != nil {
		return err
	}
	if sup {
		cur := sp[len(sp)-1]
		s.cfg.logger.Error("schedule version REFUSED: this instance's spec for the job was superseded by a newer version and versions only move forward; "+
			"from the newer version's switch instant on it claims nothing for the job. Deploy the current config, or set a new revision on the job to return to this spec on purpose",
			"job", e.job.Name, "version", e.spec.Version(), "spec", e.spec.String(), "current version", cur.version, "current from", cur.from)
		if e.vc.refuse(sp) {
			s.loops.Add(1)
			go func() { defer s.loops.Done(); s.holdRefusal(e) }()
		}
		return nil
	}
	from := epochStart
	if len(sp) > 0 {
		from = e.spec.Next(s.cfg.clock.Now().Add(s.cfg.settle))
		if last := sp[len(sp)-1].from; !from.After(last) {
			from = e.spec.Next(last)
		}
	}
	owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
	r, mine, err := createRecord(ctx, s.l, backend.CreateRecordRequest{
		Name: e.job.Name + versionSuffix, Seq: seqOf(from), Owner: owner,
		Value: versionValue{Version: e.spec.Version(), Spec: e.spec.String(), Recorded: s.cfg.clock.Now().UTC()}.encode(),
	})
	switch {
	case err != nil:
		return err
	case !mine:
		if v, err := decodeVersion(r); err != nil || v.Version != e.spec.Version() {
			return fmt.Errorf("job %q: version %s and %s both switch at %s; re-register to retry", e.job.Name, e.spec.Version(), v.Version, from)
		}
	default:
		// The record, version and spec in one write, applies from now on,
		// whatever happens to this registration.
		s.cfg.logger.Info("schedule version recorded", "job", e.job.Name, "version", e.spec.Version(), "from", from)
		s.markSuperseded(ctx, e, sp, from)
	}
	sp, err = s.spans(ctx, e)
	if err != nil {
		return err
	}
	// Another instance may have recorded a version in a race with this one
	// (two deploys at once). Whoever reads both marks the one that lost —
	// the winner its rival, the loser itself — so the mark outlives the
	// history that shows it.
	if n := len(sp); n > 1 {
		last := sp[n-1]
		if last.version == e.spec.Version() {
			s.markSuperseded(ctx, e, sp[:n-1], last.from)
		} else {
			s.markVersions(ctx, e, []string{e.spec.Version()}, last.version, last.from)
		}
	}
	e.vc.set(sp, true)
	return nil
}

// markSuperseded marks every version in sp other than e's as superseded by
// e's from instant from. A mark that fails is logged: until prune removes
// the version history, superseded finds the version there too.
func (s *Scheduler) markSuperseded(ctx context.Context, e *entry, sp []span, from time.Time) {
	var vs []string
	for _, x := range sp {
		vs = append(vs, x.version)
	}
	s.markVersions(ctx, e, vs, e.spec.Version(), from)
}

// markVersions marks each of versions (but by) superseded by version by
// from instant from, once per entry.
func (s *Scheduler) markVersions(ctx context.Context, e *entry, versions []string, by string, from time.Time) {
	for _, v := range versions {
		e.vc.mu.Lock()
		skip := v == by || e.vc.marked[v]
		e.vc.mu.Unlock()
		if skip {
			continue
		}
		owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
		_, _, err := createRecord(ctx, s.l, backend.CreateRecordRequest{Name: supersededKey(e.job.Name, v), Seq: seqOf(from), Value: by, Owner: owner})
		if err != nil { // another's record: marked before
			s.cfg.logger.Warn("marking the replaced schedule version as superseded failed; the version history still shows it",
				"job", e.job.Name, "version", v, "err", err)
			continue
		}
		e.vc.mu.Lock()
		if e.vc.marked == nil {
			e.vc.marked = map[string]bool{}
		}
		e.vc.marked[v] = true
		e.vc.mu.Unlock()
	}
}

func (vc *versionCache) set(sp []span, recorded bool) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.spans, vc.fetched, vc.recorded = sp, time.Now(), vc.recorded || recorded
	if recorded {
		vc.refused = false
	}
}

// refuse notes that the entry's version was refused; it is not retried
// until the job is registered again. It reports whether the entry did not
// refuse before (then its refusal is to be stated: holdRefusal).
func (vc *versionCache) refuse(sp []span) bool {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	was := vc.refused
	vc.spans, vc.fetched, vc.recorded, vc.refused = sp, time.Now(), true, true
	return !was
}

// state returns the cached current version, from when it applies, and
// whether the entry's version was refused.
func (vc *versionCache) state() (current string, from time.Time, refused bool) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if n := len(vc.spans); n > 0 {
		current, from = vc.spans[n-1].version, vc.spans[n-1].from
	}
	return current, from, vc.refused
}

// versionAllows reports whether e's version applies at instant at.
func (s *Scheduler) versionAllows(ctx context.Context, e *entry, at time.Time) (bool, error) {
	e.vc.mu.Lock()
	sp, fresh, recorded := e.vc.spans, time.Since(e.vc.fetched) < s.refreshEvery(), e.vc.recorded
	e.vc.mu.Unlock()
	if !recorded { // registration could not record the version: try again
		if err := s.ensureVersion(ctx, e); err != nil {
			return false, err
		}
		fresh = false
	}
	if !fresh {
		var err error
		if sp, err = s.spans(ctx, e); err != nil {
			return false, err
		}
		if len(sp) == 0 {
			// The ledger holds no version at all although one was recorded:
			// the backend lost its data (a Redis without persistence
			// restarted empty). Record ours again, or no instance would
			// ever claim this job.
			s.cfg.logger.Warn("the job's schedule version is gone from the ledger (backend data lost?); recording it again", "job", e.job.Name)
			if err := s.ensureVersion(ctx, e); err != nil {
				return false, err
			}
			e.vc.mu.Lock()
			sp = e.vc.spans
			e.vc.mu.Unlock()
		} else {
			e.vc.set(sp, false)
			if last := sp[len(sp)-1]; last.version == e.spec.Version() && len(sp) > 1 {
				// The current version marks every one before it, also those
				// another instance recorded in a race with it (two deploys
				// at once): the history that says they were replaced is
				// pruned one day, the marks are not.
				s.markSuperseded(ctx, e, sp[:len(sp)-1], last.from)
			}
		}
	}
	at = backend.Instant(at)
	for i := len(sp) - 1; i >= 0; i-- {
		if !at.Before(sp[i].from) {
			return sp[i].version == e.spec.Version(), nil
		}
	}
	return false, nil
}

// leaderState runs the scheduler's leader election once some job needs it.
type leaderState struct {
	once    sync.Once
	flag    atomic.Bool
	elector atomic.Pointer[leasehold.Elector]
	term    atomic.Pointer[leaderTerm]
}

func (l *leaderState) is() bool { return l.flag.Load() }

func (l *leaderState) start(s *Scheduler, _ context.Context) {
	l.once.Do(func() {
		opts := []leasehold.Option{leasehold.WithInstance(s.cfg.instance), leasehold.WithNamespace(s.cfg.namespace), leasehold.WithLogger(s.cfg.logger)}
		if lo, ok := s.cfg.observer.(leasehold.Observer); ok { // leadership events too
			opts = append(opts, leasehold.WithObserver(lo))
		}
		el, err := leasehold.NewElector(s.b, LeaderRole, leasehold.Callbacks{OnElected: l.elected}, opts...)
		if err != nil {
			s.cfg.logger.Error("leader election unavailable", "err", err)
			return
		}
		l.elector.Store(el)
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			for {
				err := el.Run(s.loopCtx, func(lctx context.Context) error {
					l.flag.Store(true)
					<-lctx.Done()
					l.flag.Store(false)
					return nil
				})
				l.term.Store(nil)
				if err != nil {
					s.cfg.logger.Warn("leader election failed; campaigning again", "role", LeaderRole, "err", err)
				}
				// Run returns after a Resign (or an error): let another
				// instance take the role before campaigning again.
				select {
				case <-s.loopCtx.Done():
					return
				case <-time.After(rejoinAfter):
				}
			}
		}()
	})
}
