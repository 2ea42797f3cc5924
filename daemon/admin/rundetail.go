package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// RunDetail is one run with its whole output, its timings and its
// attempts: what an operator reads in an incident.
type RunDetail struct {
	Run
	// LateMS is how long after its instant the occurrence was first
	// claimed (for attempt 1; a later attempt's claim is a retry's or a
	// recovery's). Absent when unknown.
	LateMS *int64 `json:"late_ms,omitempty"`
	// Attempts are the occurrence's attempts, first to last; the last is
	// the run itself.
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one attempt of an occurrence.
type Attempt struct {
	Attempt int `json:"attempt"`
	// State is failed for a retried failure, the run's state for the last
	// attempt, and AttemptUnrecorded for an attempt that left no record
	// (its runner died or lost its lease, and a recovery took over).
	State      string          `json:"state"`
	Instance   string          `json:"instance,omitempty"`
	Token      leasehold.Token `json:"token,omitempty"`
	FinishedAt string          `json:"finished_at,omitempty"`
	DurationMS int64           `json:"duration_ms"`
	Result     string          `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// AttemptUnrecorded is Attempt.State for an attempt without a record.
const AttemptUnrecorded = "unrecorded"

// maxAttemptsShown bounds the attempts a detail reads (a retry policy
// allows 101, crash recoveries add some).
const maxAttemptsShown = 200

// getRun answers one run with its whole output and its attempts.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	job, raw := r.PathValue("job"), r.PathValue("at")
	if q := newQuery(r); q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	at, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		s.writeFailure(w, r, fieldErr("scheduled_at", "%q is not an RFC 3339 instant", raw))
		return
	}
	if !s.ownsLedgerJob(job) {
		s.unknownJob(w, job)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	run, err := s.ledger.GetRun(ctx, job, at)
	if errors.Is(err, backend.ErrNotFound) {
		writeError(w, http.StatusNotFound, "scheduled_at", fmt.Sprintf("job %q has no run scheduled at %s", job, raw))
		return
	}
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	d, err := s.runDetail(ctx, run)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) runDetail(ctx context.Context, run backend.Run) (RunDetail, error) {
	d := RunDetail{Run: s.apiRun(run, 0), Attempts: []Attempt{}}
	if run.Attempt <= 1 && !run.ClaimedAt.IsZero() {
		late := max(0, run.ClaimedAt.Sub(run.ScheduledAt).Milliseconds())
		d.LateMS = &late
	}
	if !backend.IsJobMeta(run.Job) {
		for n := max(1, run.Attempt-maxAttemptsShown); n < run.Attempt; n++ {
			a, err := schedule.ReadAttempt(ctx, s.ledger, run.Job, n, run.ScheduledAt)
			switch {
			case errors.Is(err, backend.ErrNotFound):
				d.Attempts = append(d.Attempts, Attempt{Attempt: n, State: AttemptUnrecorded})
				continue
			case err != nil:
				return RunDetail{}, fmt.Errorf("reading attempt %d of %s@%s: %w", n, run.Job, ts(run.ScheduledAt), err)
			}
			tok, _ := strconv.ParseUint(a.SpecVersion, 10, 64) // the attempt's token (schedule.ReadAttempt)
			d.Attempts = append(d.Attempts, Attempt{Attempt: n, State: string(a.State), Instance: a.Owner.Instance, Token: leasehold.Token(tok),
				FinishedAt: ts(a.FinishedAt), DurationMS: a.Duration.Milliseconds(), Result: s.cfg.redact(a.Result), Error: s.cfg.redact(a.Error)})
		}
	}
	d.Attempts = append(d.Attempts, Attempt{Attempt: max(1, run.Attempt), State: d.State, Instance: d.Instance, Token: d.Token,
		FinishedAt: d.FinishedAt, DurationMS: d.DurationMS, Result: d.Result, Error: d.Error})
	return d, nil
}
