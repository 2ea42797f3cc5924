package schedule

import (
	"context"
	"sort"
	"time"

	"github.com/leasehold/leasehold"
)

// LeaderRole is the election role under which the scheduler's leader (for
// jobs in Leader mode) is elected, in the scheduler's namespace.
const LeaderRole = "schedule/leader"

// rejoinAfter is how long an instance that resigned the scheduler's
// leadership waits before campaigning again, so that another instance
// takes the role.
const rejoinAfter = 2 * time.Second

// JobStatus describes a registered job for status pages.
type JobStatus struct {
	Name     string
	Schedule string
	Zone     string // "" = UTC
	Mode     Mode
	// Next are the job's next instants after the time of the call (UTC).
	Next []time.Time
	// Version is the job's schedule version on this instance;
	// CurrentVersion the job's newest recorded version as last read from
	// the ledger ("" before it was read), applying from CurrentFrom.
	Version        string
	CurrentVersion string
	CurrentFrom    time.Time
	// VersionRefused: Version was superseded by a newer one, so this
	// instance refused to record it again and claims nothing under it (it
	// runs an old config; see Job.Revision).
	VersionRefused bool
}

// JobStatuses returns the registered jobs, by name, each with its next n
// instants (n is clamped to 0..100).
func (s *Scheduler) JobStatuses(n int) []JobStatus {
	n = max(0, min(n, 100))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.clock.Now()
	out := make([]JobStatus, 0, len(s.jobs))
	for _, e := range s.jobs {
		js := JobStatus{Name: e.job.Name, Schedule: e.spec.String(), Zone: e.job.Zone, Mode: e.job.Mode, Version: e.spec.Version()}
		js.CurrentVersion, js.CurrentFrom, js.VersionRefused = e.vc.state()
		at := now
		for range n {
			if at = e.spec.Next(at); at.IsZero() {
				break
			}
			js.Next = append(js.Next, at.UTC())
		}
		out = append(out, js)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Instance returns this scheduler's instance name.
func (s *Scheduler) Instance() string { return s.cfg.instance }

// Namespace returns this scheduler's namespace.
func (s *Scheduler) Namespace() string { return s.cfg.namespace }

// leaderTerm is one term of this instance's scheduler leadership.
type leaderTerm struct {
	token leasehold.Token
	since time.Time
}

func (l *leaderState) elected(tok leasehold.Token) {
	l.term.Store(&leaderTerm{token: tok, since: time.Now()})
}

// Leadership reports whether this instance is the scheduler's leader (see
// LeaderRole), since when (by this host's clock) and under which fencing
// token. It is false when no job runs in Leader mode.
func (s *Scheduler) Leadership() (leading bool, since time.Time, token leasehold.Token) {
	t := s.leading.term.Load()
	if t == nil || !s.leading.is() {
		return false, time.Time{}, 0
	}
	return true, t.since, t.token
}

// ResignLeadership steps down from the scheduler's leadership if this
// instance holds it, and returns whether it did. The instance campaigns
// again after a short pause, so another instance normally takes over.
func (s *Scheduler) ResignLeadership(ctx context.Context) (bool, error) {
	el := s.leading.elector.Load()
	if el == nil || !s.leading.is() {
		return false, nil
	}
	if err := el.Resign(ctx); err != nil {
		return false, err
	}
	return true, nil
}
