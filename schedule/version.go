package schedule

import (
	"context"
	"errors"
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

const versionSuffix = "!version"

// epochStart is where a job's first version applies from.
var epochStart = time.UnixMilli(1).UTC()

type span struct {
	from    time.Time
	version string
}

// spans returns the version switches of a job, oldest first, with runs of
// one version collapsed to their first record.
func (s *Scheduler) spans(ctx context.Context, job string) ([]span, error) {
	recs, err := s.l.ListRuns(ctx, backend.RunFilter{Job: job + versionSuffix, Limit: 20})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 { // history pruned (or never written): the mark remains
		hw, ver, err := s.l.HighWater(ctx, job+versionSuffix)
		if err != nil || hw.IsZero() {
			return nil, err
		}
		return []span{{hw, ver}}, nil
	}
	var out []span
	for i := len(recs) - 1; i >= 0; i-- { // ListRuns is newest first
		r := recs[i]
		if len(out) > 0 && out[len(out)-1].version == r.SpecVersion {
			continue
		}
		out = append(out, span{r.ScheduledAt, r.SpecVersion})
	}
	return out, nil
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
	fetched  time.Time // local monotonic
	recorded bool      // this entry's version is recorded (ensureVersion succeeded)
}

func (s *Scheduler) refreshEvery() time.Duration { return (s.cfg.settle - s.cfg.tolerance) / 2 }

// ensureVersion records e's version as the job's current one if it is not.
// It runs when the job is registered: the newest registration wins from its
// switch instant on. An instance that later sees a newer version does not
// propose its own again (that would flip-flop a rolling deploy).
func (s *Scheduler) ensureVersion(ctx context.Context, e *entry) error {
	sp, err := s.spans(ctx, e.job.Name)
	if err != nil {
		return err
	}
	if len(sp) > 0 && sp[len(sp)-1].version == e.spec.Version() {
		e.vc.set(sp, true)
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
	req := backend.ClaimRequest{
		Job: e.job.Name + versionSuffix, ScheduledAt: from, SpecVersion: e.spec.Version(),
		Owner: owner, TTL: time.Minute, MaxEarly: 100 * 365 * 24 * time.Hour, // a switch may lie weeks ahead
	}
	g, err := s.l.Claim(ctx, req)
	var claimed *backend.ClaimedError
	switch {
	case errors.As(err, &claimed):
		if claimed.Run.SpecVersion != e.spec.Version() {
			return fmt.Errorf("job %q: version %s and %s both switch at %s; re-register to retry", e.job.Name, e.spec.Version(), claimed.Run.SpecVersion, from)
		}
	case err != nil:
		return err
	default:
		s.cfg.logger.Info("schedule version recorded", "job", e.job.Name, "version", e.spec.Version(), "from", from)
		if err := s.l.Finish(ctx, req.Job, from, owner, g.Token, backend.Outcome{State: backend.Succeeded, Result: e.spec.String()}); err != nil {
			return err
		}
	}
	sp, err = s.spans(ctx, e.job.Name)
	if err != nil {
		return err
	}
	e.vc.set(sp, true)
	return nil
}

func (vc *versionCache) set(sp []span, recorded bool) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.spans, vc.fetched, vc.recorded = sp, time.Now(), vc.recorded || recorded
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
		if sp, err = s.spans(ctx, e.job.Name); err != nil {
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
