package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// A job's state on this daemon (Job.State).
const (
	// JobActive: this daemon's schedule version applies; it claims the
	// job's occurrences.
	JobActive = "active"
	// JobPaused: the job is paused (everywhere).
	JobPaused = "paused"
	// JobPending: this daemon's version was recorded and applies from a
	// switch instant still ahead; until then it claims nothing.
	JobPending = "pending"
	// JobSuperseded: another version applies (recorded by another daemon,
	// or by this one's config before a reload); this daemon claims nothing
	// for the job.
	JobSuperseded = "superseded"
	// JobRefused: this daemon's version was superseded before and it
	// refused to record it again (versions only move forward); it claims
	// nothing for the job until its config sets a new revision.
	JobRefused = "refused"
)

// JobStates lists the states of Job.State, for metrics.
var JobStates = []string{JobActive, JobPaused, JobPending, JobSuperseded, JobRefused}

// stallMargin is how long after the applying version's first instant an
// occurrence under it may go unclaimed before the job is said to run
// nowhere: claims happen at the instant, so a few seconds is late.
const stallMargin = 10 * time.Second

// epochEnd: a version record from before it is a job's first version,
// which applies from the epoch (not from an instant of its own).
var epochEnd = time.Unix(86400, 0)

// clusterState fills j.State and j.Cluster: what this daemon does for the
// job and what applies to it across the namespace, read from the ledger
// (every daemon reads the same records, so each shows the same cluster
// state whichever config it runs). lastClaimed is the job's high-water
// mark (zero for an every-instance job); refusals are the job's refusal
// statements (schedule.ReadAllRefusals).
func (s *Server) clusterState(ctx context.Context, j *Job, js schedule.JobStatus, lastClaimed time.Time, refusals []schedule.Refusal) error {
	recs, err := schedule.ReadVersions(ctx, s.ledger, js.Name)
	if err != nil {
		return fmt.Errorf("job %q: schedule versions: %w", js.Name, err)
	}
	now := time.Now()
	// mine: a record of this daemon's version (or of its legacy hash, which
	// the scheduler reads as its own: its cached current version says so).
	mine := func(r schedule.VersionRecord) bool {
		return r.Version == js.Version || (js.CurrentVersion == js.Version && r.From.Equal(js.CurrentFrom))
	}
	var applies, next *schedule.VersionRecord // newest record in effect, and one still ahead
	for i := range recs {                     // newest first
		r := recs[i]
		if r.From.After(now) {
			next = &recs[i]
			continue
		}
		applies = &r
		break
	}
	c := &JobCluster{Running: true}
	j.Cluster = c
	if applies != nil {
		c.Version, c.Since, c.Schedule = applies.Version, ts(applies.From), applies.Spec
		if mine(*applies) {
			c.Version = js.Version
		}
	}
	if next != nil {
		c.NextVersion, c.NextFrom = next.Version, ts(next.From)
		if mine(*next) {
			c.NextVersion = js.Version
		}
	}
	switch {
	case j.Paused:
		j.State = JobPaused
	case js.VersionRefused:
		j.State = JobRefused
	case applies != nil && mine(*applies):
		j.State = JobActive
	case next != nil && mine(*next):
		j.State = JobPending
	case applies == nil && next == nil:
		j.State = JobActive // nothing recorded yet: this daemon records its version at start-up
	default:
		j.State = JobSuperseded
	}
	if j.Mode == string(schedule.EveryInstance) {
		runs, err := s.ledger.ListRuns(ctx, backend.RunFilter{Job: js.Name, Limit: 1})
		if err != nil {
			return fmt.Errorf("job %q: latest run: %w", js.Name, err)
		}
		if len(runs) > 0 {
			lastClaimed = runs[0].ScheduledAt
		}
	}
	var where []string
	for _, r := range refusals {
		spec := "" // the refused version's spec, if its record is still kept
		for _, rec := range recs {
			if rec.Version == r.Version {
				spec = rec.Spec
			}
		}
		c.RefusedOn = append(c.RefusedOn, JobRefusal{Instance: r.Instance, Version: r.Version, Schedule: spec})
		where = append(where, fmt.Sprintf("%s (schedule %q, version %s)", r.Instance, spec, r.Version))
	}
	switch {
	case j.Paused:
		c.Running, c.Note = false, "paused: no instance claims its occurrences until it is resumed"
	case applies != nil && applies.From.After(epochEnd) && lastClaimed.Before(applies.From) && now.Sub(applies.From) > stallMargin:
		// The applying version's first instant is its from instant: no
		// daemon claimed it, nor any after.
		c.Running = false
		c.Note = fmt.Sprintf("NOT RUNNING ANYWHERE: version %s (schedule %q) applies since %s and no instance has claimed an occurrence under it: "+
			"no daemon runs that version (a daemon that refused its own version, or runs a replaced one, claims nothing)", c.Version, c.Schedule, c.Since)
	}
	if len(where) > 0 {
		if c.Note != "" {
			c.Note += "; "
		}
		c.Note += "refused on " + strings.Join(where, ", ") + ": each claims nothing for the job until its config has the current schedule or sets a new `revision:`"
	}
	switch j.State {
	case JobRefused:
		j.StateNote = fmt.Sprintf("this daemon's schedule %q (version %s) was replaced by version %s and versions only move forward, so it claims nothing for the job. "+
			"To run this schedule again on purpose, set `revision:` on the job in this daemon's config to a number the job has not had (e.g. one more than now) and reload every daemon with it; "+
			"to keep version %s, deploy the config that has its schedule %q", js.Schedule, js.Version, c.Version, c.Version, c.Schedule)
	case JobSuperseded:
		j.StateNote = fmt.Sprintf("this daemon's schedule %q (version %s) no longer applies: version %s (schedule %q) applies since %s, so this daemon claims nothing for the job; deploy the current config (or set a new `revision:` to return to this schedule on purpose)",
			js.Schedule, js.Version, c.Version, c.Schedule, c.Since)
	case JobPending:
		j.StateNote = fmt.Sprintf("this daemon's version %s applies from %s; until then the previous version's daemons claim the job", js.Version, c.NextFrom)
	}
	return nil
}

// Jobs returns this daemon's jobs with their states, as GET /api/v1/jobs
// does (without next instants); the daemon's metrics read it.
func (s *Server) Jobs(ctx context.Context) ([]Job, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return s.jobs(ctx, 0, "")
}
