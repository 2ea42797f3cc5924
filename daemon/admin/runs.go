package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// MaxRunsAnswer bounds the bytes of one GET /api/v1/runs answer.
const MaxRunsAnswer = 4 << 20

// maxRunsReads is how many GET /api/v1/runs are served at once (whoever
// asks); more wait their turn, within the request's timeout.
const maxRunsReads = 2

func (s *Server) getRuns(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "job", "state", "instance", "since", "before", "limit", "cursor")
	f := runQuery{
		job: q.v.Get("job"), state: backend.RunState(q.v.Get("state")), instance: q.v.Get("instance"),
		since: q.time("since"), before: q.time("before"), limit: q.int("limit", 50, 1, 1000),
	}
	if f.instance != "" {
		if err := backend.CheckOwner(backend.Owner{Instance: f.instance, Nonce: backend.NewNonce()}); err != nil {
			q.fail("instance", "%q is not an instance name: %v", f.instance, err)
		}
	}
	if !f.since.IsZero() && !f.before.IsZero() && !f.since.Before(f.before) {
		q.fail("since", "%q is not before before=%q: the range is empty", q.v.Get("since"), q.v.Get("before"))
	}
	switch f.state {
	case "", backend.Running, backend.Succeeded, backend.Failed, backend.Abandoned:
	default:
		q.fail("state", "%q is not running, succeeded, failed or abandoned", f.state)
	}
	if c := q.v.Get("cursor"); c != "" {
		var err error
		if f.cursorAt, f.cursorJob, err = parseCursor(c); err != nil {
			q.fail("cursor", "%q is not a cursor from next_cursor", c)
		}
	}
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	if f.job != "" && !s.ownsLedgerJob(f.job) {
		s.unknownJob(w, f.job)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	select {
	case s.runsSlots <- struct{}{}:
		defer func() { <-s.runsSlots }()
	case <-ctx.Done():
		s.writeFailure(w, r, fmt.Errorf("waiting for another run-history read to end: %w", ctx.Err()))
		return
	}
	page, err := s.runs(ctx, f)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// ownsLedgerJob: name is one of this daemon's jobs, or the ledger name of
// one of its trigger keys' records ("<job>!trigger!<key>"; the triggered
// runs themselves are runs of the job).
func (s *Server) ownsLedgerJob(name string) bool {
	base, key, trig := strings.Cut(name, "!trigger!")
	if trig && leasehold.ValidatePath("key", key) != nil {
		return false
	}
	for _, js := range s.sched.JobStatuses(0) {
		if js.Name == base {
			return true
		}
	}
	return false
}

type runQuery struct {
	job           string
	state         backend.RunState
	instance      string // "": any runner
	since, before time.Time
	limit         int
	cursorAt      time.Time
	cursorJob     string
}

// Cursors name the last run of a page: "<unix ms>~<job>". Pages are in the
// ledger's order — newest instant first, ties by job name — and the next
// page starts after the cursor's run.
func cursorOf(r backend.Run) string {
	return strconv.FormatInt(r.ScheduledAt.UnixMilli(), 10) + "~" + r.Job
}

func parseCursor(c string) (time.Time, string, error) {
	ms, job, ok := strings.Cut(c, "~")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || job == "" {
		return time.Time{}, "", errors.New("bad cursor")
	}
	return time.UnixMilli(n).UTC(), job, nil
}

// runs reads history of this daemon's jobs (one query per job, merged),
// newest first.
func (s *Server) runs(ctx context.Context, q runQuery) (RunPage, error) {
	names := []string{q.job}
	if q.job == "" {
		names = names[:0]
		for _, js := range s.sched.JobStatuses(0) {
			names = append(names, js.Name) // every-instance jobs too: their triggered runs are recorded
		}
	}
	before := q.before
	if !q.cursorAt.IsZero() && (before.IsZero() || q.cursorAt.Add(time.Millisecond).Before(before)) {
		before = q.cursorAt.Add(time.Millisecond)
	}
	var all []backend.Run
	for _, name := range names {
		rs, err := s.listJobRuns(ctx, backend.RunFilter{Job: name, State: q.state, Since: q.since, Before: before, Limit: q.limit + 1}, q.instance)
		if err != nil {
			return RunPage{}, fmt.Errorf("listing runs of job %q: %w", name, err)
		}
		for _, r := range rs {
			if !q.cursorAt.IsZero() && r.ScheduledAt.Equal(q.cursorAt) && r.Job <= q.cursorJob {
				continue // on the previous page
			}
			all = append(all, r)
		}
	}
	f := backend.RunFilter{Limit: q.limit + 1}
	all = f.Page(all)
	page := RunPage{Runs: make([]Run, 0, min(len(all), q.limit))}
	size := 0
	for i, r := range all {
		if i == q.limit {
			page.NextCursor = cursorOf(all[i-1])
			break
		}
		run := s.apiRun(r, listOutputMax)
		// The answer's bytes, as JSON escapes them (a control byte
		// takes six): past MaxRunsAnswer the page ends early, with a
		// cursor to the rest.
		enc, err := json.MarshalIndent(run, "    ", "  ") // as writeJSON indents it
		if err != nil {
			return RunPage{}, err
		}
		if size += len(enc) + len(",\n    "); size > MaxRunsAnswer-runsPageSlack && i > 0 {
			page.NextCursor = cursorOf(all[i-1])
			break
		}
		page.Runs = append(page.Runs, run)
	}
	return page, nil
}

// listJobRuns lists one job's runs by f; with instance set, only the runs
// whose (last) runner is that instance, read in batches until f.Limit of
// them are found or the job's history ends (the ledger has no runner
// filter). The request's timeout bounds the scan.
func (s *Server) listJobRuns(ctx context.Context, f backend.RunFilter, instance string) ([]backend.Run, error) {
	if instance == "" {
		return s.ledger.ListRuns(ctx, f)
	}
	want := f.Limit
	f.Limit = max(want, scanBatch)
	var out []backend.Run
	for {
		rs, err := s.ledger.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if r.Owner.Instance == instance {
				out = append(out, r)
			}
		}
		if len(out) >= want || len(rs) < f.Limit {
			return out[:min(len(out), want)], nil
		}
		f.Before = rs[len(rs)-1].ScheduledAt // one job: instants are unique
	}
}

// scanBatch is how many runs one ledger read takes when the runs are
// filtered here (by instance).
const scanBatch = 500

// listOutputMax is how many bytes of a run's result and error a list
// carries (a preview); the run's detail request carries them whole.
const listOutputMax = 1024

// runsPageSlack is room in MaxRunsAnswer for what surrounds the runs.
const runsPageSlack = 4 << 10

// apiRun is r as the API shows it, its result and error redacted and, when
// max > 0, cut to max bytes each (OutputTruncated then says so).
func (s *Server) apiRun(r backend.Run, max int) Run {
	run := Run{
		Job: r.Job, ScheduledAt: ts(r.ScheduledAt), State: string(r.State), Expired: r.State == backend.Running && r.Expired,
		Instance: r.Owner.Instance, Token: leasehold.Token(r.Token), Attempt: r.Attempt,
		ClaimedAt: ts(r.ClaimedAt), FinishedAt: ts(r.FinishedAt), DurationMS: r.Duration.Milliseconds(),
		Result: s.cfg.redact(r.Result), Error: s.cfg.redact(r.Error), Trigger: triggerKey(r),
	}
	if max > 0 && (len(run.Result) > max || len(run.Error) > max) {
		run.Result, run.Error, run.OutputTruncated = backend.CleanText(run.Result, max), backend.CleanText(run.Error, max), true
	}
	return run
}

// triggerKey is the idempotency key of a triggered run, "" for a scheduled one.
func triggerKey(r backend.Run) string {
	key, _ := schedule.IsTriggered(r)
	return key
}
