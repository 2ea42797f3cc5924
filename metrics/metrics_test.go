package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/schedule"
)

// server serves the metrics package's routes over a real HTTP listener.
type server struct {
	*httptest.Server
	m *metrics.Metrics
}

func newServer(t *testing.T, b backend.Leases, namespace string) *server {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	routes, err := metrics.Routes(reg, b, namespace)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &server{Server: srv, m: m}
}

// scrape GETs /metrics and returns every sample as
// `name{label="value",...}` (labels sorted) → value. Histograms appear as
// their _count and _sum.
func (s *server) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			key := name + "{" + strings.Join(ls, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[strings.Replace(key, "{", "_count{", 1)] = float64(m.GetHistogram().GetSampleCount())
				out[strings.Replace(key, "{", "_sum{", 1)] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// waitMetric waits until the scraped sample satisfies cond.
func (s *server) waitMetric(t *testing.T, sample string, cond func(float64) bool) {
	t.Helper()
	var (
		v  float64
		ok bool
	)
	if !eventually.Within(20*time.Second, func() bool {
		v, ok = s.scrape(t)[sample]
		return ok && cond(v)
	}) {
		t.Fatalf("%s = %v (present %v) after 20s", sample, v, ok)
	}
}

func expect(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func openSQLite(t *testing.T) *sqlite.Backend {
	t.Helper()
	b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestLockMetricsSQLite(t *testing.T) {
	ctx := context.Background()
	b := openSQLite(t)
	srv := newServer(t, b, "m")
	lk, err := leasehold.NewLocker(b, leasehold.WithObserver(srv.m), leasehold.WithNamespace("m"), leasehold.WithInstance("i1"),
		leasehold.WithTTL(3*time.Second), leasehold.WithRenewEvery(100*time.Millisecond), leasehold.WithRenewDeadline(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var held []*leasehold.Lock
	for i := range 3 {
		l, err := lk.TryAcquire(ctx, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if _, err := lk.TryAcquire(ctx, "k0"); !errors.Is(err, leasehold.ErrLockNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	srv.waitMetric(t, `leasehold_renewals_total{backend="sqlite",kind="lock",namespace="m"}`, func(v float64) bool { return v >= 6 })
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A lease released under its holder by someone else is lost.
	l, err := lk.TryAcquire(ctx, "stolen")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := b.Get(ctx, leasehold.LockKey("m", "stolen"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, cur.Key, cur.Owner, cur.Token); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	srv.waitMetric(t, `leasehold_leases_lost_total{backend="sqlite",kind="lock",namespace="m"}`, func(v float64) bool { return v >= 1 })
	_ = l.Release(ctx)

	got := srv.scrape(t)
	expect(t, got, map[string]float64{
		`leasehold_acquire_duration_seconds_count{backend="sqlite",kind="lock",namespace="m",result="ok"}`:   4,
		`leasehold_acquire_duration_seconds_count{backend="sqlite",kind="lock",namespace="m",result="held"}`: 1,
		`leasehold_releases_total{backend="sqlite",kind="lock",namespace="m",result="ok"}`:                   4,
		`leasehold_leases_lost_total{backend="sqlite",kind="lock",namespace="m"}`:                            1,
	})
	if f := got[`leasehold_renewal_failures_total{backend="sqlite",kind="lock",namespace="m"}`]; f != 0 {
		t.Errorf("%v renewal failures against a healthy backend", f)
	}
}

func TestElectionMetrics(t *testing.T) {
	b := memory.New()
	defer b.Close()
	srv := newServer(t, b, "m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(name string) (*leasehold.Elector, chan error) {
		el, err := leasehold.NewElector(b, "consumer", leasehold.Callbacks{}, leasehold.WithObserver(srv.m),
			leasehold.WithNamespace("m"), leasehold.WithInstance(name))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx, func(lctx context.Context) error { <-lctx.Done(); return nil }) }()
		return el, done
	}
	a, aDone := run("a")
	srv.waitMetric(t, `leasehold_leader{namespace="m",role="consumer"}`, func(v float64) bool { return v == 1 })
	_, bDone := run("b")
	// b campaigns and sees a leading (a saw itself before).
	srv.waitMetric(t, `leasehold_leadership_changes_total{event="new_leader",namespace="m",role="consumer"}`, func(v float64) bool { return v == 2 })
	// a steps down; b takes over.
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	srv.waitMetric(t, `leasehold_leadership_changes_total{event="elected",namespace="m",role="consumer"}`, func(v float64) bool { return v == 2 })
	cancel()
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	expect(t, srv.scrape(t), map[string]float64{
		`leasehold_leadership_changes_total{event="demoted_resigned",namespace="m",role="consumer"}`:       1,
		`leasehold_leadership_changes_total{event="demoted_done",namespace="m",role="consumer"}`:           1,
		`leasehold_leader{namespace="m",role="consumer"}`:                                                  0,
		`leasehold_acquire_duration_seconds_count{backend="memory",kind="role",namespace="m",result="ok"}`: 2,
	})
	// new_leader: a saw itself; b saw a, then itself.
	srv.waitMetric(t, `leasehold_leadership_changes_total{event="new_leader",namespace="m",role="consumer"}`, func(v float64) bool { return v == 3 })
}

// jobEffects is what the jobs themselves did: the reference the metrics
// are checked against.
type jobEffects struct {
	mu     sync.Mutex
	ok     map[int64]int
	failed map[int64]int
}

func (f *jobEffects) add(r schedule.Run, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if failed {
		f.failed[r.ScheduledAt.UnixMilli()]++
	} else {
		f.ok[r.ScheduledAt.UnixMilli()]++
	}
}

func (f *jobEffects) counts() (ok, failed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.ok {
		ok += n
	}
	for _, n := range f.failed {
		failed += n
	}
	return ok, failed
}

func TestScheduleMetricsSQLite(t *testing.T) {
	b := openSQLite(t)
	srv := newServer(t, b, "m")
	fx := &jobEffects{ok: map[int64]int{}, failed: map[int64]int{}}
	var scheds []*schedule.Scheduler
	for i := range 2 {
		s, err := schedule.New(b, schedule.WithInstance(fmt.Sprintf("i%d", i)), schedule.WithNamespace("m"), schedule.WithObserver(srv.m),
			schedule.WithClaimTolerance(100*time.Millisecond), schedule.WithVersionSettle(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 50ms",
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r, false); return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Register(schedule.Job{Name: "broken", Schedule: "@every 100ms",
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r, true); return errors.New("boom") }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	var ok int
	if !eventually.Within(time.Minute, func() bool { ok, _ = fx.counts(); return ok >= 20 }) {
		t.Fatalf("only %d runs of tick in a minute", ok)
	}
	for _, s := range scheds {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ok, failed := fx.counts()
	got := srv.scrape(t)
	expect(t, got, map[string]float64{
		`leasehold_runs_total{job="tick",namespace="m",result="succeeded"}`:                 float64(ok),
		`leasehold_runs_total{job="broken",namespace="m",result="failed"}`:                  float64(failed),
		`leasehold_claims_total{job="tick",namespace="m",result="won"}`:                     float64(ok),
		`leasehold_claims_total{job="broken",namespace="m",result="won"}`:                   float64(failed),
		`leasehold_run_duration_seconds_count{job="tick",namespace="m",result="succeeded"}`: float64(ok),
		`leasehold_ledger_prune_passes_total{namespace="m",result="ok"}`:                    2, // one at each start-up
	})
	if c := got[`leasehold_claims_total{job="tick",namespace="m",result="conflict"}`]; c < 1 || c > float64(ok) {
		t.Errorf("%v conflicted claims of tick for %d won, with two instances claiming each occurrence", c, ok)
	}
	if _, ok := got[`leasehold_runs_total{job="broken",namespace="m",result="succeeded"}`]; ok {
		t.Errorf("a job that always fails is counted as succeeded")
	}
}

func TestCatchUpAndPruneMetrics(t *testing.T) {
	ctx := context.Background()
	b := openSQLite(t)
	srv := newServer(t, b, "m")
	spec, _ := schedule.Parse("@every 1h", "")
	last := spec.Next(time.Now().Add(-7 * time.Hour))
	// The ledger as namespace m's schedulers see it.
	if _, err := schedule.NamespaceLedger(b, "m").Claim(ctx, backend.ClaimRequest{Job: "hourly", ScheduledAt: last, SpecVersion: spec.Version(),
		Owner: backend.Owner{Instance: "old", Nonce: backend.NewNonce()}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Two finished runs of a retired job, older than the retention by the
	// time the scheduler starts.
	const retention = 500 * time.Millisecond
	for i := range 2 {
		at := backend.Instant(time.Now().Add(-time.Duration(i+1) * time.Second))
		owner := backend.Owner{Instance: "old", Nonce: backend.NewNonce()}
		g, err := b.Claim(ctx, backend.ClaimRequest{Job: "retired", ScheduledAt: at, Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Finish(ctx, backend.FinishRequest{Job: "retired", ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
			t.Fatal(err)
		}
	}
	finished := time.Now()
	for time.Since(finished) <= 2*retention {
		time.Sleep(10 * time.Millisecond) // a condition on the clock, not a guess
	}
	pruner, err := schedule.New(b, schedule.WithInstance("pruner"), schedule.WithNamespace("m"), schedule.WithObserver(srv.m),
		schedule.WithRetention(retention), schedule.WithClaimTolerance(100*time.Millisecond), schedule.WithVersionSettle(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := pruner.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv.waitMetric(t, `leasehold_ledger_prune_passes_total{namespace="m",result="ok"}`, func(v float64) bool { return v == 1 })
	if err := pruner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The hourly job last ran 7 hours ago; run-all catches up the latest 3.
	s, err := schedule.New(b, schedule.WithInstance("back"), schedule.WithNamespace("m"), schedule.WithObserver(srv.m),
		schedule.WithClaimTolerance(100*time.Millisecond), schedule.WithVersionSettle(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := 0
	if err := s.Register(schedule.Job{Name: "hourly", Schedule: "@every 1h", Misfire: schedule.MisfireRunAll, MaxCatchUp: 3,
		MisfireWindow: 24 * time.Hour, Func: func(context.Context, schedule.Run) error { mu.Lock(); ran++; mu.Unlock(); return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv.waitMetric(t, `leasehold_runs_total{job="hourly",namespace="m",result="succeeded"}`, func(v float64) bool { return v == 3 })
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	expect(t, srv.scrape(t), map[string]float64{
		`leasehold_ledger_pruned_runs_total{namespace="m"}`:               2,
		`leasehold_misfires_caught_up_total{job="hourly",namespace="m"}`:  float64(ran),
		`leasehold_claims_total{job="hourly",namespace="m",result="won"}`: float64(ran),
	})
	if ran != 3 {
		t.Errorf("%d catch-up runs, want 3", ran)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	b := openSQLite(t)
	srv := newServer(t, b, "m")
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/healthz"); c != 200 {
		t.Fatalf("/healthz = %d", c)
	}
	if c := get("/readyz"); c != 200 {
		t.Fatalf("/readyz with the backend open = %d", c)
	}
	b.Close() // the backend becomes unreachable
	if c := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the backend closed = %d, want 503", c)
	}
	if c := get("/healthz"); c != 200 {
		t.Fatalf("/healthz with the backend closed = %d (the process is alive)", c)
	}
	if _, err := metrics.Readyz(b, "bad:ns", 0); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("Readyz with a bad namespace: %v", err)
	}
	if _, err := metrics.New(nil); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("New(nil): %v", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("a second New on one registry succeeded: it would count twice")
	}
}
