package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// JobInstants is a job's time axis over a window: every instant its
// schedule had and every run recorded, each marked.
type JobInstants struct {
	Job string `json:"job"`
	// Schedule and Zone are the spec the instants were computed from: the
	// one that applies across the namespace (JobCluster.Schedule), else
	// this daemon's.
	Schedule string `json:"schedule"`
	Zone     string `json:"zone"`
	Since    string `json:"since"`
	Before   string `json:"before"`
	// LateAfterMS: a run first claimed more than this after its instant is
	// marked late.
	LateAfterMS int64 `json:"late_after_ms"`
	// JudgedFrom..JudgedUntil is the part of the window in which an
	// instant without a run is marked missed: from when the applying
	// schedule version applies (or was first recorded) to a margin before
	// now (an occurrence is claimed at its instant, so one just due may
	// still be claimed). Absent when nothing is judged: an every-instance
	// job's scheduled runs are not recorded, and a job without a recorded
	// version has no known start.
	JudgedFrom  string `json:"judged_from,omitempty"`
	JudgedUntil string `json:"judged_until,omitempty"`
	// Instants are oldest first.
	Instants []Instant `json:"instants"`
}

// Instant is one mark of a job's time axis.
type Instant struct {
	At string `json:"at"`
	// State is the run's state, or InstantMissed for an instant of the
	// schedule with no run recorded.
	State    string          `json:"state"`
	Late     bool            `json:"late,omitempty"`
	LateMS   int64           `json:"late_ms,omitempty"`
	Instance string          `json:"instance,omitempty"`
	Token    leasehold.Token `json:"token,omitempty"`
	Attempt  int             `json:"attempt,omitempty"`
	Trigger  string          `json:"trigger,omitempty"`
}

// InstantMissed is Instant.State for an instant the schedule had and no
// instance ran.
const InstantMissed = "missed"

// Time-axis bounds.
const (
	// LateAfter: a run first claimed more than this after its instant is
	// late (claims are made at the instant, within clock tolerance).
	LateAfter = time.Second
	// maxAxisInstants bounds the instants (and runs) of one answer.
	maxAxisInstants = 2000
	// defaultAxisWindow is the window without since.
	defaultAxisWindow = time.Hour
)

func (s *Server) getJobInstants(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "since", "before")
	since, before := q.time("since"), q.time("before")
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	now := time.Now()
	if before.IsZero() {
		before = now
	}
	if since.IsZero() {
		since = before.Add(-defaultAxisWindow)
	}
	since, before = backend.CeilInstant(since), backend.CeilInstant(before)
	if !since.Before(before) {
		s.writeFailure(w, r, fieldErr("since", "%s is not before before=%s: the window is empty", ts(since), ts(before)))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	name := r.PathValue("job")
	jobs, err := s.jobs(ctx, 0, name)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	if len(jobs) == 0 {
		s.unknownJob(w, name)
		return
	}
	out, err := s.jobInstants(ctx, jobs[0], since, before, now)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// jobInstants marks j's runs in [since, before) and, where judged, the
// schedule's instants without one.
func (s *Server) jobInstants(ctx context.Context, j Job, since, before, now time.Time) (JobInstants, error) {
	out := JobInstants{Job: j.Name, Schedule: j.Schedule, Zone: j.Zone, Since: ts(since), Before: ts(before), LateAfterMS: LateAfter.Milliseconds(), Instants: []Instant{}}
	if j.Cluster != nil && j.Cluster.Schedule != "" {
		out.Schedule = j.Cluster.Schedule
	}
	zone := j.Zone
	if zone == "UTC" {
		zone = ""
	}
	spec, err := schedule.Parse(out.Schedule, zone)
	if err != nil && out.Schedule != j.Schedule { // a recorded spec this daemon cannot read: its own
		out.Schedule = j.Schedule
		spec, err = schedule.Parse(j.Schedule, zone)
	}
	if err != nil {
		return JobInstants{}, fmt.Errorf("job %q: schedule %q: %w", j.Name, out.Schedule, err)
	}
	runs, err := s.ledger.ListRuns(ctx, backend.RunFilter{Job: j.Name, Since: since, Before: before, Limit: maxAxisInstants + 1})
	if err != nil {
		return JobInstants{}, fmt.Errorf("listing runs of job %q: %w", j.Name, err)
	}
	if len(runs) > maxAxisInstants {
		return JobInstants{}, fieldErr("since", "job %q has more than %d runs in %s..%s: narrow since/before", j.Name, maxAxisInstants, ts(since), ts(before))
	}
	byAt := make(map[int64]backend.Run, len(runs))
	for _, r := range runs {
		byAt[r.ScheduledAt.UnixMilli()] = r
	}
	from, until := time.Time{}, backend.Instant(now.Add(-stallMargin))
	if j.Mode != string(schedule.EveryInstance) {
		from, err = s.judgedFrom(ctx, j.Name)
		if err != nil {
			return JobInstants{}, err
		}
	}
	known := !from.IsZero()
	from, until = maxTime(from, since), minTime(until, before)
	if judged := known && from.Before(until); judged {
		out.JudgedFrom, out.JudgedUntil = ts(from), ts(until)
		n := 0
		for at := spec.Next(from.Add(-time.Millisecond)); !at.IsZero() && at.Before(until); at = spec.Next(at) {
			if n++; n > maxAxisInstants {
				return JobInstants{}, fieldErr("since", "schedule %q of job %q has more than %d instants in %s..%s: narrow since/before", out.Schedule, j.Name, maxAxisInstants, ts(since), ts(before))
			}
			if _, ran := byAt[at.UnixMilli()]; !ran {
				byAt[at.UnixMilli()] = backend.Run{ScheduledAt: at} // State "" = missed
			}
		}
	}
	for _, r := range sortedRuns(byAt) {
		in := Instant{At: ts(r.ScheduledAt), State: string(r.State)}
		if r.State == "" {
			in.State = InstantMissed
		} else {
			in.Instance, in.Token, in.Attempt, in.Trigger = r.Owner.Instance, leasehold.Token(r.Token), r.Attempt, triggerKey(r)
			if late := r.ClaimedAt.Sub(r.ScheduledAt); r.Attempt <= 1 && in.Trigger == "" && !r.ClaimedAt.IsZero() && late > LateAfter {
				in.Late, in.LateMS = true, late.Milliseconds()
			}
		}
		out.Instants = append(out.Instants, in)
	}
	return out, nil
}

// judgedFrom is when the job's applying schedule version applies: its
// switch instant, or for a job's first version (recorded as applying from
// the epoch) when it was recorded. Zero when no version is recorded.
func (s *Server) judgedFrom(ctx context.Context, job string) (time.Time, error) {
	recs, err := schedule.ReadVersions(ctx, s.ledger, job)
	if err != nil {
		return time.Time{}, fmt.Errorf("job %q: schedule versions: %w", job, err)
	}
	now := time.Now()
	for _, r := range recs { // newest first
		switch {
		case r.From.After(now):
			continue // ahead
		case r.From.After(epochEnd):
			return r.From, nil
		default:
			return r.Recorded, nil
		}
	}
	return time.Time{}, nil
}

func sortedRuns(m map[int64]backend.Run) []backend.Run {
	out := make([]backend.Run, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b backend.Run) int { return a.ScheduledAt.Compare(b.ScheduledAt) })
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
