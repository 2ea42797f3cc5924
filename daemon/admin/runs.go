package admin

import (
	"context"
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

func (s *Server) getRuns(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "job", "state", "since", "before", "limit", "cursor")
	f := runQuery{
		job: q.v.Get("job"), state: backend.RunState(q.v.Get("state")),
		since: q.time("since"), before: q.time("before"), limit: q.int("limit", 50, 1, 1000),
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
		rs, err := s.ledger.ListRuns(ctx, backend.RunFilter{Job: name, State: q.state, Since: q.since, Before: before, Limit: q.limit + 1})
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
	if len(all) > q.limit {
		all = all[:q.limit]
		page.NextCursor = cursorOf(all[len(all)-1])
	}
	for _, r := range all {
		page.Runs = append(page.Runs, Run{
			Job: r.Job, ScheduledAt: ts(r.ScheduledAt), State: string(r.State), Expired: r.State == backend.Running && r.Expired,
			Instance: r.Owner.Instance, Token: leasehold.Token(r.Token), Attempt: r.Attempt,
			ClaimedAt: ts(r.ClaimedAt), FinishedAt: ts(r.FinishedAt), DurationMS: r.Duration.Milliseconds(),
			Result: s.cfg.redact(r.Result), Error: s.cfg.redact(r.Error), Trigger: triggerKey(r),
		})
	}
	return page, nil
}

// triggerKey is the idempotency key of a triggered run, "" for a scheduled one.
func triggerKey(r backend.Run) string {
	key, _ := schedule.IsTriggered(r)
	return key
}
