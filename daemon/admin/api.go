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

// serveList answers a GET that lists something of the namespace: a 400
// for bad parameters (q.err), else fetch's result as {"namespace", name}.
func serveList[T any](s *Server, w http.ResponseWriter, r *http.Request, q *query, name string, fetch func(context.Context) ([]T, error)) {
	if q.err != nil {
		s.writeFailure(w, r, q.err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	out, err := fetch(ctx)
	if err != nil {
		s.writeFailure(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": s.sched.Namespace(), name: out})
}

func (s *Server) getInstances(w http.ResponseWriter, r *http.Request) {
	serveList(s, w, r, newQuery(r), "instances", s.instances)
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
	serveList(s, w, r, newQuery(r), "leaders", s.leaders)
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
	serveList(s, w, r, q, "locks", func(ctx context.Context) ([]Lock, error) { return s.locks(ctx, p, limit) })
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
		k := Lock{Key: strings.TrimPrefix(l.Key, prefix), Kind: LockKindUser, Instance: l.Owner.Instance, Token: leasehold.Token(l.Token),
			RemainingMS: l.Remaining.Milliseconds(), ExpiresAt: ts(now.Add(l.Remaining))}
		if strings.HasPrefix(k.Key, instanceKeyPrefix) {
			k.Kind = LockKindInstance
			// A daemon's instance lock is held under "<instance>@<process>".
			if name, proc, ok := strings.Cut(k.Instance, "@"); ok {
				k.Instance, k.Process = name, proc
			}
		}
		out = append(out, k)
	}
	return out, nil
}

func (s *Server) getJobs(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "next")
	n := q.int("next", 3, 0, 100)
	serveList(s, w, r, q, "jobs", func(ctx context.Context) ([]Job, error) { return s.jobs(ctx, n, "") })
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
	statuses := s.sched.JobStatuses(next)
	if len(statuses) == 0 {
		return nil, nil
	}
	// Every job's refusals, read at once (one List, not one per job).
	refusals, err := schedule.ReadAllRefusals(ctx, s.b, s.sched.Namespace())
	if err != nil {
		return nil, fmt.Errorf("refusals: %w", err)
	}
	var out []Job
	for _, js := range statuses {
		if only != "" && js.Name != only {
			continue
		}
		j := Job{Name: js.Name, Schedule: js.Schedule, Zone: js.Zone, Mode: string(js.Mode), Next: []string{},
			Version: js.Version, CurrentVersion: js.CurrentVersion, VersionRefused: js.VersionRefused}
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
		var hw time.Time
		if js.Mode != schedule.EveryInstance {
			hw, _, err = s.ledger.HighWater(ctx, js.Name)
			if err != nil {
				return nil, fmt.Errorf("job %q: high-water mark: %w", js.Name, err)
			}
			j.LastClaimed = ts(hw)
		}
		if err := s.clusterState(ctx, &j, js, hw, refusals[js.Name]); err != nil {
			return nil, err
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
	run, err := s.sched.TriggerRun(ctx, job, key)
	switch {
	case errors.Is(err, backend.ErrOccurrenceClaimed):
		writeError(w, http.StatusConflict, "key", fmt.Sprintf("trigger key %q of job %q was used before: it runs once", key, job))
		return
	case errors.Is(err, schedule.ErrJobPaused):
		writeError(w, http.StatusConflict, "job", fmt.Sprintf("job %q is paused: trigger %q refused, nothing run (the key stays free)", job, key))
		return
	case errors.Is(err, backend.ErrOccurrenceOverlap):
		writeError(w, http.StatusConflict, "job", fmt.Sprintf("job %q is running at its concurrency limit: trigger %q refused, nothing run (the key stays free)", job, key))
		return
	case errors.Is(err, schedule.ErrJobNotFound):
		s.unknownJob(w, job)
		return
	case err != nil:
		s.writeFailure(w, r, err)
		return
	}
	s.cfg.logger.Info("admin API: job triggered", "job", job, "trigger key", key, "at", run.ScheduledAt, "token", run.Token, "remote", r.RemoteAddr)
	// The run is in the job's history at its instant; the URL selects it.
	runs := url.Values{"job": {job}, "since": {ts(run.ScheduledAt)}, "before": {ts(run.ScheduledAt.Add(time.Millisecond))}}
	writeJSON(w, http.StatusAccepted, map[string]any{"job": job, "key": key, "scheduled_at": ts(run.ScheduledAt),
		"token": run.Token, "runs": "/api/v1/runs?" + runs.Encode()})
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
		if errors.Is(err, schedule.ErrJobNotFound) {
			s.unknownJob(w, job)
			return
		}
		s.writeFailure(w, r, err)
		return
	}
	s.cfg.logger.Info("admin API: job paused state set", "job", job, "paused", paused, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"job": job, "paused": paused})
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
