package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// TimeFormat is how instants appear in the API: RFC 3339 in UTC with
// milliseconds, the precision of occurrence keys.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// instanceKeyPrefix is where daemons hold their instance leases (see
// daemon.Daemon.Run), under the namespace's lock prefix.
const instanceKeyPrefix = "instances/"

// requestTimeout bounds the backend calls of one request.
const requestTimeout = 10 * time.Second

func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(TimeFormat)
}

// Instance is one daemon of the namespace.
type Instance struct {
	Instance string `json:"instance"`
	Self     bool   `json:"self"`
	// Alive: the instance holds its instance lease now (by the backend's
	// clock). An instance seen alive by this server within the last hour
	// that no longer holds it is listed with Alive false.
	Alive            bool            `json:"alive"`
	Token            leasehold.Token `json:"token,omitempty"`
	LeaseRemainingMS int64           `json:"lease_remaining_ms,omitempty"`
	// LeaseExpiresAt is when the instance lease ends unless renewed: the
	// instance renews it every third of its TTL while it is alive.
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	LastSeen       string `json:"last_seen"` // by this server
}

// Leader is the holder of one election role of the namespace.
type Leader struct {
	Role             string          `json:"role"`
	Instance         string          `json:"instance"`
	Self             bool            `json:"self"`
	Token            leasehold.Token `json:"token"`
	LeaseRemainingMS int64           `json:"lease_remaining_ms"`
	// Since: for this instance's own term, when it was elected (this host's
	// clock); for another instance's, when this server first saw the term
	// (its token), which may be later than the election.
	Since string `json:"since"`
	// SinceObserved is true when Since is an observation, not the election.
	SinceObserved bool `json:"since_observed"`
}

// Lock is one held lease of the namespace.
type Lock struct {
	Key         string          `json:"key"`
	Instance    string          `json:"instance"`
	Token       leasehold.Token `json:"token"`
	RemainingMS int64           `json:"remaining_ms"`
	ExpiresAt   string          `json:"expires_at"`
}

// Job is one job of this daemon.
type Job struct {
	Name     string   `json:"name"`
	Schedule string   `json:"schedule"`
	Zone     string   `json:"zone"`
	Mode     string   `json:"mode"`
	Paused   bool     `json:"paused"`
	Next     []string `json:"next"`
	// LastClaimed is the latest instant claimed for the job anywhere (its
	// high-water mark), "" if never.
	LastClaimed string `json:"last_claimed,omitempty"`
}

// Run is one occurrence in the run ledger.
type Run struct {
	Job         string          `json:"job"`
	ScheduledAt string          `json:"scheduled_at"`
	State       string          `json:"state"`
	Expired     bool            `json:"expired,omitempty"` // running, but its runner's lease expired
	Instance    string          `json:"instance"`
	Token       leasehold.Token `json:"token"`
	Attempt     int             `json:"attempt"`
	ClaimedAt   string          `json:"claimed_at,omitempty"`
	FinishedAt  string          `json:"finished_at,omitempty"`
	DurationMS  int64           `json:"duration_ms"`
	Result      string          `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// RunPage is a page of history.
type RunPage struct {
	Runs []Run `json:"runs"`
	// NextCursor, when not empty, fetches the next (older) page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Status is everything the dashboard and `leasehold status` show.
type Status struct {
	Namespace string     `json:"namespace"`
	Instance  string     `json:"instance"` // the daemon serving this API
	Now       string     `json:"now"`
	Instances []Instance `json:"instances"`
	Leaders   []Leader   `json:"leaders"`
	Locks     []Lock     `json:"locks"`
	Jobs      []Job      `json:"jobs"`
	Runs      []Run      `json:"runs"`
}

// query reads and validates query parameters; the first error wins.
type query struct {
	v   url.Values
	err error
}

func newQuery(r *http.Request, allowed ...string) *query {
	q := &query{v: r.URL.Query()}
	for k, vs := range q.v {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		switch {
		case !known:
			q.fail(k, "unknown parameter %q (allowed: %s)", k, strings.Join(allowed, ", "))
		case len(vs) > 1:
			q.fail(k, "parameter %q given %d times", k, len(vs))
		}
	}
	return q
}

func (q *query) fail(field, format string, args ...any) {
	if q.err == nil {
		q.err = fieldErr(field, format, args...)
	}
}

func (q *query) int(name string, def, lo, hi int) int {
	s := q.v.Get(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		q.fail(name, "%q is not an integer in %d..%d", s, lo, hi)
		return def
	}
	return n
}

func (q *query) time(name string) time.Time {
	s := q.v.Get(name)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		q.fail(name, "%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return t
}

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), requestTimeout)
}

func (s *Server) getInstances(w http.ResponseWriter, r *http.Request) {
	if q := newQuery(r); q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	out, err := s.instances(ctx)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": s.sched.Namespace(), "instances": out})
}

func (s *Server) instances(ctx context.Context) ([]Instance, error) {
	prefix := leasehold.LockPrefix(s.sched.Namespace()) + instanceKeyPrefix
	leases, err := s.b.List(ctx, prefix, 0)
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	now := time.Now()
	live := map[string]backend.Lease{}
	var names []string
	for _, l := range leases {
		n := strings.TrimPrefix(l.Key, prefix)
		live[n] = l
		names = append(names, n)
	}
	seen, all := s.seen.instancesSeen(names, now)
	out := make([]Instance, 0, len(all))
	for _, n := range all {
		in := Instance{Instance: n, Self: n == s.sched.Instance(), LastSeen: ts(seen[n])}
		if l, ok := live[n]; ok {
			in.Alive, in.Token = true, leasehold.Token(l.Token)
			in.LeaseRemainingMS, in.LeaseExpiresAt = l.Remaining.Milliseconds(), ts(now.Add(l.Remaining))
		}
		out = append(out, in)
	}
	return out, nil
}

func (s *Server) getLeaders(w http.ResponseWriter, r *http.Request) {
	if q := newQuery(r); q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	out, err := s.leaders(ctx)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": s.sched.Namespace(), "leaders": out})
}

func (s *Server) leaders(ctx context.Context) ([]Leader, error) {
	prefix := leasehold.RoleKey(s.sched.Namespace(), "")
	leases, err := s.b.List(ctx, prefix, 0)
	if err != nil {
		return nil, fmt.Errorf("listing leaders: %w", err)
	}
	now := time.Now()
	leading, since, token := s.sched.Leadership()
	out := make([]Leader, 0, len(leases))
	for _, l := range leases {
		role := strings.TrimPrefix(l.Key, prefix)
		ld := Leader{Role: role, Instance: l.Owner.Instance, Token: leasehold.Token(l.Token), LeaseRemainingMS: l.Remaining.Milliseconds()}
		ld.Self = l.Owner.Instance == s.sched.Instance()
		obs := s.seen.termSince(role, l.Token, now)
		if ld.Self && role == schedule.LeaderRole && leading && uint64(token) == l.Token {
			ld.Since = ts(since)
		} else {
			ld.Since, ld.SinceObserved = ts(obs), true
		}
		out = append(out, ld)
	}
	return out, nil
}

func (s *Server) postResign(w http.ResponseWriter, r *http.Request) {
	role := r.PathValue("role")
	if q := newQuery(r); q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	if err := leasehold.ValidatePath("role", role); err != nil {
		writeError(w, http.StatusBadRequest, "role", err.Error())
		return
	}
	if role != schedule.LeaderRole {
		writeError(w, http.StatusNotFound, "role", fmt.Sprintf("instance %q does not campaign for role %q (only %q)", s.sched.Instance(), role, schedule.LeaderRole))
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	ok, err := s.sched.ResignLeadership(ctx)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	if !ok {
		writeError(w, http.StatusConflict, "role", fmt.Sprintf("instance %q does not lead role %q; ask the leader's API", s.sched.Instance(), role))
		return
	}
	s.cfg.logger.Info("admin API: leadership resigned", "role", role, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"role": role, "instance": s.sched.Instance(), "resigned": true})
}

func (s *Server) getLocks(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "prefix", "limit")
	limit := q.int("limit", 1000, 1, 10000)
	p := q.v.Get("prefix")
	if p != "" {
		if err := leasehold.ValidatePath("prefix", strings.TrimSuffix(p, "/")); err != nil {
			q.fail("prefix", "%v", err)
		}
	}
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	out, err := s.locks(ctx, p, limit)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": s.sched.Namespace(), "locks": out})
}

func (s *Server) locks(ctx context.Context, p string, limit int) ([]Lock, error) {
	prefix := leasehold.LockPrefix(s.sched.Namespace())
	leases, err := s.b.List(ctx, prefix+p, limit)
	if err != nil {
		return nil, fmt.Errorf("listing locks: %w", err)
	}
	now := time.Now()
	out := make([]Lock, 0, len(leases))
	for _, l := range leases {
		out = append(out, Lock{Key: strings.TrimPrefix(l.Key, prefix), Instance: l.Owner.Instance, Token: leasehold.Token(l.Token),
			RemainingMS: l.Remaining.Milliseconds(), ExpiresAt: ts(now.Add(l.Remaining))})
	}
	return out, nil
}

func (s *Server) getJobs(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "next")
	n := q.int("next", 3, 0, 100)
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	out, err := s.jobs(ctx, n, "")
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": s.sched.Namespace(), "jobs": out})
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "next")
	n := q.int("next", 3, 0, 100)
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	name := r.PathValue("job")
	out, err := s.jobs(ctx, n, name)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	if len(out) == 0 {
		s.unknownJob(w, name)
		return
	}
	writeJSON(w, http.StatusOK, out[0])
}

func (s *Server) unknownJob(w http.ResponseWriter, name string) {
	writeError(w, http.StatusNotFound, "job", fmt.Sprintf("no job %q in namespace %q on instance %q", name, s.sched.Namespace(), s.sched.Instance()))
}

// jobs returns this daemon's jobs (only the one named only, if not "").
func (s *Server) jobs(ctx context.Context, next int, only string) ([]Job, error) {
	var out []Job
	for _, js := range s.sched.JobStatuses(next) {
		if only != "" && js.Name != only {
			continue
		}
		j := Job{Name: js.Name, Schedule: js.Schedule, Zone: js.Zone, Mode: string(js.Mode), Next: []string{}}
		if j.Zone == "" {
			j.Zone = "UTC"
		}
		for _, t := range js.Next {
			j.Next = append(j.Next, ts(t))
		}
		paused, err := s.sched.Paused(ctx, js.Name)
		if err != nil {
			return nil, err
		}
		j.Paused = paused
		if js.Mode != schedule.EveryInstance {
			hw, _, err := s.ledger.HighWater(ctx, js.Name)
			if err != nil {
				return nil, fmt.Errorf("job %q: high-water mark: %w", js.Name, err)
			}
			j.LastClaimed = ts(hw)
		}
		out = append(out, j)
	}
	return out, nil
}

// jobNamed checks that the {job} path value names one of this daemon's
// jobs; it writes the 404 otherwise.
func (s *Server) jobNamed(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("job")
	for _, js := range s.sched.JobStatuses(0) {
		if js.Name == name {
			return name, true
		}
	}
	s.unknownJob(w, name)
	return "", false
}

func (s *Server) postTrigger(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "key")
	key := q.v.Get("key")
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	job, ok := s.jobNamed(w, r)
	if !ok {
		return
	}
	if key == "" {
		key = "api-" + backend.NewNonce().String()
	} else if err := leasehold.ValidatePath("key", key); err != nil {
		writeError(w, http.StatusBadRequest, "key", err.Error())
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	err := s.sched.Trigger(ctx, job, key)
	switch {
	case errors.Is(err, backend.ErrClaimed):
		writeError(w, http.StatusConflict, "key", fmt.Sprintf("trigger key %q of job %q was used before: it runs once", key, job))
		return
	case errors.Is(err, schedule.ErrUnknownJob):
		s.unknownJob(w, job)
		return
	case err != nil:
		s.writeFailure(w, r, err)
		return
	}
	s.cfg.logger.Info("admin API: job triggered", "job", job, "trigger key", key, "remote", r.RemoteAddr)
	ledgerName := job + "!trigger!" + key
	writeJSON(w, http.StatusAccepted, map[string]any{"job": job, "key": key, "ledger_job": ledgerName,
		"runs": "/api/v1/runs?job=" + url.QueryEscape(ledgerName)})
}

func (s *Server) postPause(w http.ResponseWriter, r *http.Request)  { s.setPaused(w, r, true) }
func (s *Server) postResume(w http.ResponseWriter, r *http.Request) { s.setPaused(w, r, false) }

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	if q := newQuery(r); q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	job, ok := s.jobNamed(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	set := s.sched.Resume
	if paused {
		set = s.sched.Pause
	}
	if err := set(ctx, job); err != nil {
		if errors.Is(err, schedule.ErrUnknownJob) {
			s.unknownJob(w, job)
			return
		}
		s.writeFailure(w, r, err)
		return
	}
	s.cfg.logger.Info("admin API: job paused state set", "job", job, "paused", paused, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"job": job, "paused": paused})
}

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
// one of its triggers ("<job>!trigger!<key>").
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
			if js.Mode != schedule.EveryInstance {
				names = append(names, js.Name)
			}
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
			Result: r.Result, Error: r.Error,
		})
	}
	return page, nil
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "runs")
	n := q.int("runs", 50, 0, 1000)
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	st := Status{Namespace: s.sched.Namespace(), Instance: s.sched.Instance(), Now: ts(time.Now())}
	var err error
	if st.Instances, err = s.instances(ctx); err == nil {
		if st.Leaders, err = s.leaders(ctx); err == nil {
			if st.Locks, err = s.locks(ctx, "", 1000); err == nil {
				if st.Jobs, err = s.jobs(ctx, 3, ""); err == nil && n > 0 {
					var page RunPage
					page, err = s.runs(ctx, runQuery{limit: n})
					st.Runs = page.Runs
				}
			}
		}
	}
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	if st.Jobs == nil {
		st.Jobs = []Job{}
	}
	if st.Runs == nil {
		st.Runs = []Run{}
	}
	writeJSON(w, http.StatusOK, st)
}
