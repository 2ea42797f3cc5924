package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// effects is what jobs themselves wrote: the test compares it with the
// schedule, never the ledger with itself.
type effects struct {
	mu   sync.Mutex
	runs map[int64][]schedule.Run // by ScheduledAt (ms)
}

func newEffects() *effects { return &effects{runs: map[int64][]schedule.Run{}} }

func (f *effects) add(r schedule.Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := r.ScheduledAt.UnixMilli()
	f.runs[k] = append(f.runs[k], r)
}

func (f *effects) get(at time.Time) []schedule.Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]schedule.Run(nil), f.runs[at.UnixMilli()]...)
}

func (f *effects) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

func (f *effects) instants() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ks []int64
	for k := range f.runs {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func newScheduler(t *testing.T, b backend.Backend, name string, opts ...schedule.Option) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(b, append([]schedule.Option{schedule.WithInstance(name), schedule.WithSweepEvery(50 * time.Millisecond), schedule.WithVersionSettle(time.Second), schedule.WithClaimTolerance(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t *testing.T, s *schedule.Scheduler) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
}

func TestRegistry(t *testing.T) {
	s := newScheduler(t, memory.New(), "a")
	job := schedule.Job{Name: "report", Schedule: "@daily", Func: func(context.Context, schedule.Run) error { return nil }}
	if err := s.Register(job); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(job); !errors.Is(err, schedule.ErrJobAlreadyRegistered) {
		t.Fatalf("second Register = %v, want ErrDuplicateJob", err)
	}
	job.Schedule = "@hourly"
	if err := s.Replace(job); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("nope"); !errors.Is(err, schedule.ErrJobNotFound) {
		t.Fatalf("Remove unknown = %v", err)
	}
	bad := []struct {
		job  schedule.Job
		want string
	}{
		{schedule.Job{Name: "", Schedule: "@daily", Func: job.Func}, "job name is empty"},
		{schedule.Job{Name: "a!b", Schedule: "@daily", Func: job.Func}, `"a!b"`},
		{schedule.Job{Name: "x", Schedule: "61 * * * *", Func: job.Func}, `"61 * * * *"`},
		{schedule.Job{Name: "x", Schedule: "@daily", Zone: "Nowhere/City", Func: job.Func}, `"Nowhere/City"`},
		{schedule.Job{Name: "x", Schedule: "@daily"}, "Func is nil"},
		{schedule.Job{Name: "x", Schedule: "@daily", Func: job.Func, Mode: "sometimes"}, `mode "sometimes"`},
		{schedule.Job{Name: "x", Schedule: "@daily", Func: job.Func, Misfire: "maybe"}, `misfire "maybe"`},
		{schedule.Job{Name: "x", Schedule: "@daily", Func: job.Func, Crash: "panic"}, `crash "panic"`},
		{schedule.Job{Name: "x", Schedule: "@daily", Func: job.Func, MisfireWindow: 30 * 24 * time.Hour}, "misfire window 720h0m0s must be shorter than the history retention"},
		{schedule.Job{Name: "x", Schedule: "@daily", Func: job.Func, LeaseTTL: time.Millisecond}, "lease ttl 1ms"},
	}
	for _, c := range bad {
		err := s.Register(c.job)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Register(%+v) = %v, want an error containing %q", c.job.Name, err, c.want)
		}
	}
	if got := len(s.Jobs()); got != 1 {
		t.Fatalf("%d jobs registered after rejected calls, want 1", got)
	}
}

// TestEachOccurrenceOnceAcrossInstances: 5 instances on one backend, a job
// every 10 ms, 2,000 occurrences: each ran exactly once, none was missed,
// and no two runs shared a token (tokens grow in claim order, which
// concurrent claims of neighbouring instants need not follow). In
// synctest's virtual time: "none missed" is promised only while no
// instance wakes later than the misfire grace, which a starved host
// breaks in real time (and then skip records each miss as a misfire).
func TestEachOccurrenceOnceAcrossInstances(t *testing.T) {
	synctest.Test(t, eachOccurrenceOnceAcrossInstances)
}

func eachOccurrenceOnceAcrossInstances(t *testing.T) {
	const n = 2000
	b := memory.New()
	fx := newEffects()
	var scheds []*schedule.Scheduler
	for i := range 5 {
		s := newScheduler(t, b, fmt.Sprintf("inst-%d", i))
		err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 10ms", LeaseTTL: 30 * time.Second,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		start(t, s)
	}
	eventually.True(t, 2*time.Minute, fmt.Sprintf("%d occurrences", n), func() bool { return fx.count() >= n+20 })
	for _, s := range scheds {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ks := fx.instants()
	// The window every instance was running for: skip the edges.
	ks = ks[5 : len(ks)-5]
	seen := map[leasehold.Token]int64{}
	for i, k := range ks {
		runs := fx.get(time.UnixMilli(k))
		if len(runs) != 1 {
			t.Fatalf("occurrence %v ran %d times: %+v", time.UnixMilli(k).UTC(), len(runs), runs)
		}
		if i > 0 && k-ks[i-1] != 10 {
			t.Fatalf("occurrences missed between %v and %v", time.UnixMilli(ks[i-1]).UTC(), time.UnixMilli(k).UTC())
		}
		if prev, dup := seen[runs[0].Token]; dup {
			t.Fatalf("token %d used at %v and at %v", runs[0].Token, time.UnixMilli(prev).UTC(), time.UnixMilli(k).UTC())
		}
		seen[runs[0].Token] = k
	}
	per := map[string]int{}
	for _, k := range ks {
		per[fx.get(time.UnixMilli(k))[0].Instance]++
	}
	t.Logf("%d occurrences, each once; runs per instance: %v", len(ks), per)
}

// deadRunner claims an occurrence the way a runner that then dies would:
// with a short lease and no heartbeats.
func deadRunner(t *testing.T, b backend.Backend, job string, at time.Time) backend.Grant {
	t.Helper()
	g, err := b.Claim(context.Background(), backend.ClaimRequest{
		Job: job, ScheduledAt: at, Owner: backend.Owner{Instance: "dead", Nonce: backend.NewNonce()},
		TTL: 150 * time.Millisecond, SpecVersion: "dead",
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCrashPolicies(t *testing.T) {
	for _, policy := range []schedule.Crash{schedule.CrashRetry, schedule.CrashSkip} {
		t.Run(string(policy), func(t *testing.T) {
			b := memory.New()
			fx := newEffects()
			at := backend.Instant(time.Now().Add(-time.Second))
			dead := deadRunner(t, b, "job", at)
			s := newScheduler(t, b, "survivor")
			if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", Crash: policy,
				Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
				t.Fatal(err)
			}
			start(t, s)
			eventually.True(t, 10*time.Second, "the occurrence left by the dead runner is settled", func() bool {
				r, err := b.GetRun(context.Background(), "job", at)
				return err == nil && r.State.Finished()
			})
			r, _ := b.GetRun(context.Background(), "job", at)
			runs := fx.get(at)
			switch policy {
			case schedule.CrashRetry:
				if len(runs) != 1 || runs[0].Attempt != 2 || uint64(runs[0].Token) <= dead.Token || r.State != backend.Succeeded {
					t.Fatalf("retry: runs %+v, ledger %+v; want one run, attempt 2, token > %d", runs, r, dead.Token)
				}
			case schedule.CrashSkip:
				if len(runs) != 0 || r.State != backend.Abandoned {
					t.Fatalf("skip: runs %+v, ledger state %s; want no run and abandoned", runs, r.State)
				}
			}
		})
	}
}

func TestMisfirePolicies(t *testing.T) {
	cases := []struct {
		policy schedule.Misfire
		want   int // missed occurrences run
	}{
		{schedule.MisfireSkip, 0},
		{schedule.MisfireRunOnce, 1},
		{schedule.MisfireRunAll, 3}, // MaxCatchUp
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			b := memory.New()
			fx := newEffects()
			spec, _ := schedule.Parse("@every 1h", "")
			now := time.Now()
			// The job last ran 6 hours ago; nobody was alive since.
			last := spec.Next(now.Add(-7 * time.Hour))
			g, err := b.Claim(context.Background(), backend.ClaimRequest{Job: "job", ScheduledAt: last, SpecVersion: spec.Version(),
				Owner: backend.Owner{Instance: "old", Nonce: backend.NewNonce()}, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			s := newScheduler(t, b, "back")
			if err := s.Register(schedule.Job{Name: "job", Schedule: "@every 1h", Misfire: c.policy, MaxCatchUp: 3, MisfireWindow: 24 * time.Hour,
				Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
				t.Fatal(err)
			}
			_ = g
			start(t, s)
			if c.want > 0 {
				eventually.True(t, 10*time.Second, fmt.Sprintf("%d catch-up runs", c.want), func() bool { return fx.count() >= c.want })
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := fx.instants()
			if len(got) != c.want {
				t.Fatalf("%d missed occurrences ran (%v), want %d", len(got), got, c.want)
			}
			// The ones run are the latest missed.
			latest := spec.Next(now.Add(-time.Hour))
			if !latest.After(now) && c.want > 0 && got[len(got)-1] != latest.UnixMilli() && got[len(got)-1] != latest.Add(-time.Hour).UnixMilli() {
				t.Fatalf("latest caught up %v, want the latest missed", time.UnixMilli(got[len(got)-1]).UTC())
			}
		})
	}
}

func TestRollingSpecChangeNeverRunsBothVersions(t *testing.T) {
	b := memory.New()
	fx := newEffects()
	mk := func(name, spec string) *schedule.Scheduler {
		s := newScheduler(t, b, name)
		if err := s.Register(schedule.Job{Name: "job", Schedule: spec,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := mk("old", "@every 100ms")
	start(t, old)
	eventually.True(t, 10*time.Second, "old version runs", func() bool { return fx.count() >= 5 })
	newer := mk("new", "@every 150ms")
	switchFrom := time.Now()
	start(t, newer)
	eventually.True(t, 20*time.Second, "new version runs after the switch", func() bool {
		for _, k := range fx.instants() {
			if k%150 == 0 && k%100 != 0 && fx.get(time.UnixMilli(k))[0].Instance == "new" {
				return true
			}
		}
		return false
	})
	eventually.True(t, 5*time.Second, "a few more", func() bool { return fx.count() >= 40 })
	_ = old.Shutdown(context.Background())
	_ = newer.Shutdown(context.Background())
	// Find the switch: the first instant run by the new version.
	var sw int64
	for _, k := range fx.instants() {
		if fx.get(time.UnixMilli(k))[0].Instance == "new" {
			sw = k
			break
		}
	}
	if sw == 0 || time.UnixMilli(sw).Before(switchFrom.Add(time.Second)) {
		t.Fatalf("switch at %v, want at least the settle time (1s) after the new version started at %v", time.UnixMilli(sw), switchFrom)
	}
	for _, k := range fx.instants() {
		runs := fx.get(time.UnixMilli(k))
		if len(runs) != 1 {
			t.Fatalf("instant %d ran %d times", k, len(runs))
		}
		if k < sw && (runs[0].Instance != "old" || k%100 != 0) {
			t.Fatalf("before the switch instant %d ran on %s", k, runs[0].Instance)
		}
		if k >= sw && (runs[0].Instance != "new" || k%150 != 0) {
			t.Fatalf("after the switch instant %d ran on %s", k, runs[0].Instance)
		}
	}
}

func TestShutdownGraceThenCancel(t *testing.T) {
	b := memory.New()
	started := make(chan struct{}, 1)
	var cause error
	s := newScheduler(t, b, "a", schedule.WithGrace(100*time.Millisecond))
	_ = s.Register(schedule.Job{Name: "slow", Schedule: "@every 50ms", Misfire: schedule.MisfireSkip,
		Func: func(ctx context.Context, r schedule.Run) error {
			select {
			case started <- struct{}{}:
			default:
				return nil
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}})
	start(t, s)
	<-started
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, schedule.ErrSchedulerShutdown) {
		t.Fatalf("job's cause = %v, want ErrShutdown", cause)
	}
	runs, _ := b.ListRuns(context.Background(), backend.RunFilter{Job: "slow", State: backend.Failed})
	if len(runs) != 1 || !strings.Contains(runs[0].Error, "shut down") {
		t.Fatalf("failed runs after shutdown: %+v", runs)
	}
}

func TestModes(t *testing.T) {
	b := memory.New()
	every, lead := newEffects(), newEffects()
	var scheds []*schedule.Scheduler
	for i := range 3 {
		s := newScheduler(t, b, fmt.Sprintf("n%d", i))
		_ = s.Register(schedule.Job{Name: "local", Schedule: "@every 50ms", Mode: schedule.EveryInstance,
			Func: func(_ context.Context, r schedule.Run) error { every.add(r); return nil }})
		_ = s.Register(schedule.Job{Name: "lead", Schedule: "@every 50ms", Mode: schedule.Leader,
			Func: func(_ context.Context, r schedule.Run) error { lead.add(r); return nil }})
		scheds = append(scheds, s)
		start(t, s)
	}
	eventually.True(t, 10*time.Second, "runs", func() bool { return every.count() >= 10 && lead.count() >= 10 })
	for _, s := range scheds {
		_ = s.Shutdown(context.Background())
	}
	ks := every.instants()
	full := 0
	for _, k := range ks {
		if n := len(every.get(time.UnixMilli(k))); n == 3 {
			full++
		} else if n > 3 {
			t.Fatalf("every-instance occurrence ran %d times on 3 instances", n)
		}
	}
	if full == 0 {
		t.Fatalf("no every-instance occurrence ran on all 3 instances")
	}
	leaders := map[string]bool{}
	for _, k := range lead.instants() {
		runs := lead.get(time.UnixMilli(k))
		if len(runs) != 1 {
			t.Fatalf("leader-mode occurrence ran %d times", len(runs))
		}
		leaders[runs[0].Instance] = true
	}
	if len(leaders) != 1 {
		t.Fatalf("leader-mode runs on %v, want one leader", leaders)
	}
}

func TestTriggerIsIdempotentPerKey(t *testing.T) {
	b := memory.New()
	fx := newEffects()
	var scheds []*schedule.Scheduler
	for i := range 2 {
		s := newScheduler(t, b, fmt.Sprint("n", i))
		_ = s.Register(schedule.Job{Name: "report", Schedule: "@yearly", Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }})
		start(t, s)
		scheds = append(scheds, s)
	}
	ctx := context.Background()
	if err := scheds[0].Trigger(ctx, "report", "deploy-42"); err != nil {
		t.Fatal(err)
	}
	if err := scheds[1].Trigger(ctx, "report", "deploy-42"); !errors.Is(err, backend.ErrOccurrenceClaimed) {
		t.Fatalf("second trigger with the same key = %v, want ErrClaimed", err)
	}
	if err := scheds[1].Trigger(ctx, "report", "deploy-43"); err != nil {
		t.Fatal(err)
	}
	if err := scheds[1].Trigger(ctx, "nope", "k"); !errors.Is(err, schedule.ErrJobNotFound) {
		t.Fatalf("trigger of an unknown job = %v", err)
	}
	eventually.True(t, 5*time.Second, "two triggered runs", func() bool { return totalRuns(fx) == 2 })
}

func totalRuns(f *effects) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, rs := range f.runs {
		n += len(rs)
	}
	return n
}

func TestNoOverlapAcrossInstances(t *testing.T) {
	b := memory.New()
	var running, peak, runs atomicCounter
	var scheds []*schedule.Scheduler
	for i := range 3 {
		s := newScheduler(t, b, fmt.Sprint("n", i))
		_ = s.Register(schedule.Job{Name: "slow", Schedule: "@every 50ms", MaxConcurrent: 1,
			Func: func(ctx context.Context, r schedule.Run) error {
				peak.max(running.add(1))
				defer running.add(-1)
				runs.add(1)
				time.Sleep(120 * time.Millisecond) // the job's work, spanning the next occurrences
				return nil
			}})
		start(t, s)
		scheds = append(scheds, s)
	}
	eventually.True(t, 10*time.Second, "several runs", func() bool { return runs.get() >= 6 })
	for _, s := range scheds {
		_ = s.Shutdown(context.Background())
	}
	if peak.get() != 1 {
		t.Fatalf("%d runs at once across the cluster with MaxConcurrent 1", peak.get())
	}
}

type atomicCounter struct {
	mu sync.Mutex
	v  int
}

func (c *atomicCounter) add(d int) int { c.mu.Lock(); defer c.mu.Unlock(); c.v += d; return c.v }
func (c *atomicCounter) get() int      { c.mu.Lock(); defer c.mu.Unlock(); return c.v }
func (c *atomicCounter) max(v int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v > c.v {
		c.v = v
	}
}

// TestHotReloadNeverLeavesTwoTimers replaces a running every-instance job
// (no claims, so a second timer would show as a second local run) many times
// while it fires, from several goroutines.
func TestHotReloadNeverLeavesTwoTimers(t *testing.T) {
	fx := newEffects()
	s := newScheduler(t, memory.New(), "a")
	job := schedule.Job{Name: "local", Schedule: "@every 10ms", Mode: schedule.EveryInstance,
		Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}
	if err := s.Register(job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if err := s.Replace(job); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(3 * time.Millisecond) // reloads spread over the firing
			}
		}()
	}
	wg.Wait()
	eventually.True(t, 5*time.Second, "runs after the reloads", func() bool { return fx.count() >= 20 })
	_ = s.Shutdown(context.Background())
	for _, k := range fx.instants() {
		if n := len(fx.get(time.UnixMilli(k))); n != 1 {
			t.Fatalf("instant %v ran %d times on one instance: two timers", time.UnixMilli(k).UTC(), n)
		}
	}
	if got := len(s.Jobs()); got != 1 {
		t.Fatalf("%d jobs registered", got)
	}
}
