package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// TestModes runs in a synctest bubble: the 50 ms instants the three
// instances must each run, and the leader's lease, are virtual time.
func TestModes(t *testing.T) {
	synctest.Test(t, modes)
}

// modes is TestModes
// inside its bubble.
func modes(t *testing.T) {
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

// TestNoOverlapAcrossInstances runs in a synctest bubble: the job's 120 ms
// of work spanning the next 50 ms instants is virtual time, exact.
func TestNoOverlapAcrossInstances(t *testing.T) {
	synctest.Test(t, noOverlapAcrossInstances)
}

// noOverlapAcrossInstances is TestNoOverlapAcrossInstances
// inside its bubble.
func noOverlapAcrossInstances(t *testing.T) {
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

// leasesOnly hides every method of a backend but those of backend.Leases,
// as a backend that keeps no run ledger (redlock) is built.
type leasesOnly struct{ backend.Leases }

// TestNewRefusesBackendWithoutLedger: the ledger is optional at the seam,
// so the scheduler asks for it, and refuses a backend without one by name.
func TestNewRefusesBackendWithoutLedger(t *testing.T) {
	m := memory.New()
	defer m.Close()
	if _, err := schedule.New(leasesOnly{m}); err == nil {
		t.Fatal("New over a backend without a ledger succeeded")
	} else if !errors.Is(err, backend.ErrNoLedger) || !strings.Contains(err.Error(), `"memory"`) {
		t.Fatalf("New = %v, want an error wrapping backend.ErrNoLedger naming the backend", err)
	}
	if _, err := schedule.New(m); err != nil {
		t.Fatalf("New over the full backend: %v", err)
	}
}

// Every option refuses a bad argument with ErrInvalid, naming the option and
// the value; an option of the Locker's own is refused by New and one of the
// Scheduler's own by NewLocker.
func TestOptionsValidated(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	for _, tc := range []struct {
		name string
		opts []schedule.Option
		want string
	}{
		{"empty instance", []schedule.Option{leasehold.WithInstance("")}, `WithInstance("")`},
		{"long instance", []schedule.Option{leasehold.WithInstance(strings.Repeat("i", 129))}, `WithInstance("iii`},
		{"namespace", []schedule.Option{leasehold.WithNamespace("a/../b")}, `WithNamespace("a/../b")`},
		{"drift", []schedule.Option{leasehold.WithDrift(0.5)}, "WithDrift(0.5)"},
		{"margin", []schedule.Option{leasehold.WithMargin(-time.Millisecond)}, "WithMargin(-1ms)"},
		{"logger", []schedule.Option{leasehold.WithLogger(nil)}, "WithLogger(nil)"},
		{"deprecated instance", []schedule.Option{schedule.WithInstance("")}, `WithInstance("")`},
		{"deprecated drift", []schedule.Option{schedule.WithDrift(-1)}, "WithDrift(-1)"},
		{"clock", []schedule.Option{schedule.WithClock(nil)}, "WithClock(nil)"},
		{"grace", []schedule.Option{schedule.WithGrace(-time.Second)}, "WithGrace(-1s)"},
		{"tolerance", []schedule.Option{schedule.WithClaimTolerance(-time.Second)}, "WithClaimTolerance(-1s)"},
		{"retention", []schedule.Option{schedule.WithRetention(0)}, "WithRetention(0s)"},
		{"sweep", []schedule.Option{schedule.WithSweepEvery(-time.Second)}, "WithSweepEvery(-1s)"},
		{"settle", []schedule.Option{schedule.WithVersionSettle(0)}, "WithVersionSettle(0s)"},
		{"settle within tolerance", []schedule.Option{schedule.WithClaimTolerance(2 * time.Second), schedule.WithVersionSettle(time.Second)}, "version settle 1s must exceed the claim tolerance 2s"},
		{"a Locker's option", []schedule.Option{leasehold.WithTTL(time.Second)}, "leasehold.WithTTL configures a Locker or an Elector, not a Scheduler"},
		{"a Locker's observer", []schedule.Option{leasehold.WithObserver(nil)}, "leasehold.WithObserver configures a Locker or an Elector, not a Scheduler"},
	} {
		_, err := schedule.New(mem, tc.opts...)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
	}
	_, err := leasehold.NewLocker(mem, schedule.WithGrace(time.Second))
	if want := "schedule.WithGrace configures a Scheduler, not a Locker or an Elector"; !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("NewLocker(schedule.WithGrace) = %v, want ErrInvalid containing %q", err, want)
	}
}

// The shared options, defined once in the root package, configure a
// Scheduler as they do a Locker; the deprecated copies in this package still
// work.
func TestSharedOptions(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	shared := []leasehold.Option{
		leasehold.WithInstance("web-1"), leasehold.WithNamespace("prod/billing"),
		leasehold.WithDrift(0.02), leasehold.WithMargin(time.Millisecond), leasehold.WithLogger(slog.Default()),
	}
	s, err := schedule.New(mem, append(shared, schedule.WithGrace(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	if s.Instance() != "web-1" || s.Namespace() != "prod/billing" {
		t.Fatalf("Scheduler instance %q namespace %q, want web-1 prod/billing", s.Instance(), s.Namespace())
	}
	lk, err := leasehold.NewLocker(mem, append(shared, leasehold.WithTTL(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	if lk.Instance() != "web-1" || lk.Namespace() != "prod/billing" {
		t.Fatalf("Locker instance %q namespace %q, want web-1 prod/billing", lk.Instance(), lk.Namespace())
	}
	old, err := schedule.New(mem, schedule.WithInstance("web-2"), schedule.WithNamespace("old"), schedule.WithLogger(slog.Default()),
		schedule.WithDrift(0.02), schedule.WithMargin(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if old.Instance() != "web-2" || old.Namespace() != "old" {
		t.Fatalf("Scheduler instance %q namespace %q, want web-2 old", old.Instance(), old.Namespace())
	}
}

// TestReplaceRemoveChurnNeverDoublesNorLosesAJob: a job replaced, removed
// and registered again under the same name while its instants come due
// (a SIGHUP reload storm) never runs one instant twice — two timers for
// one name would — and still runs once the churn ends.
func TestReplaceRemoveChurnNeverDoublesNorLosesAJob(t *testing.T) {
	s, err := schedule.New(memory.New(), schedule.WithInstance("i1"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type occ struct {
		job string
		at  time.Time
	}
	runs := map[occ]int{}
	var latest time.Time
	job := schedule.Job{Name: "churn", Schedule: "@every 20ms", Mode: schedule.EveryInstance,
		Func: func(_ context.Context, r schedule.Run) error {
			mu.Lock()
			defer mu.Unlock()
			runs[occ{r.Job, r.ScheduledAt}]++
			if r.Job == "churn" && r.ScheduledAt.After(latest) {
				latest = r.ScheduledAt
			}
			return nil
		}}
	if err := s.Register(job); err != nil {
		t.Fatal(err)
	}
	other := job
	other.Name = "other"
	if err := s.Register(other); err != nil { // shares the timer heap
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	for i := range 300 {
		switch i % 3 {
		case 0, 1:
			if err := s.Replace(job); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := s.Remove("churn"); err != nil {
				t.Fatal(err)
			}
			if err := s.Register(job); err != nil {
				t.Fatal(err)
			}
		}
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // let instants come due between bursts
		}
	}
	ended := time.Now()
	eventually.True(t, 10*time.Second, "a run of the job after the churn", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return latest.After(ended)
	})
	mu.Lock()
	defer mu.Unlock()
	for o, n := range runs {
		if n > 1 {
			t.Errorf("job %s's instant %v ran %d times on one instance", o.job, o.at, n)
		}
	}
}
