package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// triggerBackends are the backends the trigger tests run on: the memory
// backend and a real SQLite file.
func triggerBackends(t *testing.T, fn func(t *testing.T, b backend.Backend)) {
	t.Run("memory", func(t *testing.T) { fn(t, memory.New()) })
	t.Run("sqlite", func(t *testing.T) {
		b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		fn(t, b)
	})
}

// gate is a job body that counts how many of its runs are inside it at
// once and holds each until released.
type gate struct {
	in, peak, ran atomicCounter
	release       chan struct{}
	fx            *effects
}

func newGate() *gate { return &gate{release: make(chan struct{}), fx: newEffects()} }

func (g *gate) fn(ctx context.Context, r schedule.Run) error {
	g.peak.max(g.in.add(1))
	defer g.in.add(-1)
	g.ran.add(1)
	g.fx.add(r)
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	r.Report("output of " + r.Job)
	return nil
}

// triggerAll fires n concurrent triggers with keys k0..k(n-1) and returns
// their errors by key.
func triggerAll(s *schedule.Scheduler, job string, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.Trigger(context.Background(), job, fmt.Sprint("k", i)) }()
	}
	wg.Wait()
	return errs
}

// TestTriggerOfPausedJobRunsNothing: 30 concurrent triggers of a paused
// job with MaxConcurrent 1 run nothing and record nothing; each is refused
// with ErrPaused, and its key stays free for after the resume.
func TestTriggerOfPausedJobRunsNothing(t *testing.T) {
	triggerBackends(t, func(t *testing.T, b backend.Backend) {
		g := newGate()
		close(g.release)
		s := newScheduler(t, b, "a")
		if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", MaxConcurrent: 1, Func: g.fn}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		ctx := context.Background()
		if err := s.Pause(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		for i, err := range triggerAll(s, "job", 30) {
			if !errors.Is(err, schedule.ErrJobPaused) {
				t.Fatalf("trigger k%d of a paused job = %v, want ErrPaused", i, err)
			}
		}
		l := schedule.NamespaceLedger(b, leasehold.DefaultNamespace)
		runs, err := l.ListRuns(ctx, backend.RunFilter{Job: "job"})
		if err != nil || len(runs) != 0 || g.ran.get() != 0 {
			t.Fatalf("paused triggers left runs %+v (err %v) and ran the job %d times, want none", runs, err, g.ran.get())
		}
		if err := s.Resume(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		if err := s.Trigger(ctx, "job", "k7"); err != nil {
			t.Fatalf("trigger with a key refused while paused, after the resume: %v", err)
		}
		eventually.True(t, 10*time.Second, "the triggered run", func() bool { return g.ran.get() == 1 })
	})
}

// TestTriggerHonoursMaxConcurrent: of 30 concurrent triggers of a job with
// MaxConcurrent 1, one runs and the others are refused with ErrOverlap;
// never two run at once. A refused key stays free: once the run finished it
// runs; a key that ran does not run again.
func TestTriggerHonoursMaxConcurrent(t *testing.T) {
	triggerBackends(t, func(t *testing.T, b backend.Backend) {
		g := newGate()
		s := newScheduler(t, b, "a")
		if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", MaxConcurrent: 1, Func: g.fn}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		won := -1
		for i, err := range triggerAll(s, "job", 30) {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("triggers k%d and k%d both ran with MaxConcurrent 1", won, i)
			case !errors.Is(err, backend.ErrOccurrenceOverlap):
				t.Fatalf("trigger k%d = %v, want nil or ErrOverlap", i, err)
			}
		}
		if won < 0 {
			t.Fatal("none of 30 triggers ran")
		}
		eventually.True(t, 10*time.Second, "the winning trigger runs", func() bool { return g.ran.get() == 1 })
		close(g.release)
		ctx := context.Background()
		l := schedule.NamespaceLedger(b, leasehold.DefaultNamespace)
		eventually.True(t, 10*time.Second, "the run is recorded", func() bool {
			runs, err := l.ListRuns(ctx, backend.RunFilter{Job: "job", State: backend.Succeeded})
			return err == nil && len(runs) == 1
		})
		refused := fmt.Sprint("k", (won+1)%30)
		if err := s.Trigger(ctx, "job", refused); err != nil {
			t.Fatalf("retry of refused key %s after the run finished: %v", refused, err)
		}
		if err := s.Trigger(ctx, "job", fmt.Sprint("k", won)); !errors.Is(err, backend.ErrOccurrenceClaimed) {
			t.Fatalf("trigger with the key that ran = %v, want ErrClaimed", err)
		}
		eventually.True(t, 10*time.Second, "the retried key runs", func() bool { return g.ran.get() == 2 })
		if p := g.peak.get(); p != 1 {
			t.Fatalf("%d triggered runs at once with MaxConcurrent 1", p)
		}
	})
}

// TestTriggeredRunIsARunOfTheJob: a triggered run takes the job's token
// sequence (greater than every scheduled run's token, so a fenced sink
// accepts it), runs at the trigger's instant, and is recorded in the job's
// history with its output, marked as triggered.
func TestTriggeredRunIsARunOfTheJob(t *testing.T) {
	triggerBackends(t, func(t *testing.T, b backend.Backend) {
		ctx := context.Background()
		l := schedule.NamespaceLedger(b, leasehold.DefaultNamespace)
		// 32 runs of the job as another instance's schedule recorded them.
		var high uint64
		for i := range 32 {
			at := backend.Instant(time.Now().Add(-time.Hour + time.Duration(i)*time.Second))
			o := backend.Owner{Instance: "old", Nonce: backend.NewNonce()}
			gr, err := l.Claim(ctx, backend.ClaimRequest{Job: "job", ScheduledAt: at, SpecVersion: "v", Owner: o, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: o, Token: gr.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
				t.Fatal(err)
			}
			high = max(high, gr.Token)
		}
		g := newGate()
		close(g.release)
		s := newScheduler(t, b, "a")
		if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", Func: g.fn}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		before := backend.Instant(time.Now())
		r, err := s.TriggerRun(ctx, "job", "manual-1")
		after := backend.Instant(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if uint64(r.Token) <= high || r.ScheduledAt.Before(before) || r.ScheduledAt.After(after) {
			t.Fatalf("triggered run %+v: want token > %d (the scheduled runs') and instant in [%v, %v]", r, high, before, after)
		}
		eventually.True(t, 10*time.Second, "the triggered run is recorded", func() bool {
			rec, err := l.GetRun(ctx, "job", r.ScheduledAt)
			return err == nil && rec.State == backend.Succeeded
		})
		ran := g.fx.get(r.ScheduledAt)
		if len(ran) != 1 || ran[0].Token != r.Token || ran[0].Job != "job" {
			t.Fatalf("the job saw %+v, want one run at %v with token %d", ran, r.ScheduledAt, r.Token)
		}
		rec, _ := l.GetRun(ctx, "job", r.ScheduledAt)
		if key, ok := schedule.IsTriggered(rec); !ok || key != "manual-1" || rec.Result != "output of job" || rec.Token != uint64(r.Token) || rec.Owner.Instance != "a" {
			t.Fatalf("ledger record %+v: want triggered by manual-1, output recorded, token %d, owner a", rec, r.Token)
		}
		runs, err := l.ListRuns(ctx, backend.RunFilter{Job: "job", Limit: 1})
		if err != nil || len(runs) != 1 || !runs[0].ScheduledAt.Equal(r.ScheduledAt) {
			t.Fatalf("newest run of the job = %+v (err %v), want the triggered one", runs, err)
		}
	})
}

// TestTriggerBadInputChangesNothing: a malformed key or an unknown job is
// refused with an error naming the field and the value, and nothing is run
// or recorded.
func TestTriggerBadInputChangesNothing(t *testing.T) {
	b := memory.New()
	g := newGate()
	close(g.release)
	s := newScheduler(t, b, "a")
	if err := s.Register(schedule.Job{Name: "job", Schedule: "@yearly", Func: g.fn}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	long := strings.Repeat("k", 121)
	for _, c := range []struct{ job, key, want string }{
		{"job", "", "trigger key is empty"},
		{"job", "bad key", `"bad key"`},
		{"job", long, long[:40]},
	} {
		if err := s.Trigger(context.Background(), c.job, c.key); !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Trigger(%q, %.20q) = %v, want ErrInvalid naming %.50q", c.job, c.key, err, c.want)
		}
	}
	if err := s.Trigger(context.Background(), "nope", "k"); !errors.Is(err, schedule.ErrJobNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Trigger of an unknown job = %v, want ErrUnknownJob naming it", err)
	}
	runs, err := b.ListRuns(context.Background(), backend.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Job != "job!version" { // the schedule version, recorded at Start
			t.Errorf("a refused trigger recorded %+v", r)
		}
	}
	if g.ran.get() != 0 {
		t.Errorf("refused triggers ran the job %d times", g.ran.get())
	}
}

var errCut = errors.New("injected: partitioned from the backend")

// partition cuts its instance off the backend once cut is set: every
// ledger call then fails as a network error would (not applied).
func partition(b backend.Backend, cut *atomic.Bool) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			if cut.Load() {
				return errCut
			}
			return next(ctx, req)
		},
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			if cut.Load() {
				return errCut
			}
			return next(ctx, req)
		},
		OnReclaim: func(ctx context.Context, next faultbackend.ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
			if cut.Load() {
				return backend.Grant{}, backend.Run{}, errCut
			}
			return next(ctx, req)
		},
		OnListRuns: func(ctx context.Context, next faultbackend.ListRunsFunc, f backend.RunFilter) ([]backend.Run, error) {
			if cut.Load() {
				return nil, errCut
			}
			return next(ctx, f)
		},
	}
}

// TestTriggeredRunOfDeadRunnerIsReclaimed: a triggered run whose runner is
// cut off mid-run (its lease expires, its outcome never recorded) is
// reclaimed by another instance's sweeper like any run: attempt 2, a
// greater token, still marked as triggered.
func TestTriggeredRunOfDeadRunnerIsReclaimed(t *testing.T) {
	for _, mode := range []schedule.Mode{schedule.Once, schedule.EveryInstance} {
		t.Run(string(mode), func(t *testing.T) { testTriggeredRunOfDeadRunner(t, mode) })
	}
}

func testTriggeredRunOfDeadRunner(t *testing.T, mode schedule.Mode) {
	triggerBackends(t, func(t *testing.T, b backend.Backend) {
		fx := newEffects()
		var cut atomic.Bool
		p := partition(b, &cut)
		job := func(instance string) schedule.Job {
			return schedule.Job{Name: "job", Schedule: "@yearly", Mode: mode, LeaseTTL: 300 * time.Millisecond,
				Func: func(ctx context.Context, r schedule.Run) error {
					fx.add(r)
					if instance == "a" {
						cut.Store(true) // the runner is cut off mid-run
						<-ctx.Done()    // and its lease is lost
					}
					return nil
				}}
		}
		a := newScheduler(t, p, "a")
		if err := a.Register(job("a")); err != nil {
			t.Fatal(err)
		}
		start(t, a)
		r, err := a.TriggerRun(context.Background(), "job", "manual-1")
		if err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "the triggered run starts on a", func() bool { return len(fx.get(r.ScheduledAt)) == 1 })
		s := newScheduler(t, b, "b")
		if err := s.Register(job("b")); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		l := schedule.NamespaceLedger(b, leasehold.DefaultNamespace)
		eventually.True(t, 20*time.Second, "the dead runner's triggered run is settled", func() bool {
			rec, err := l.GetRun(context.Background(), "job", r.ScheduledAt)
			return err == nil && rec.State.Finished()
		})
		runs := fx.get(r.ScheduledAt)
		rec, _ := l.GetRun(context.Background(), "job", r.ScheduledAt)
		key, triggered := schedule.IsTriggered(rec)
		if len(runs) != 2 || runs[1].Instance != "b" || runs[1].Attempt != 2 || runs[1].Token <= runs[0].Token ||
			rec.State != backend.Succeeded || !triggered || key != "manual-1" {
			t.Fatalf("runs %+v, ledger %+v: want a second run by b, attempt 2, greater token, succeeded, still triggered", runs, rec)
		}
	})
}

// TestCatchUpLooksPastATrigger: a triggered run raises the job's high-water
// mark, but catch-up still starts after the latest scheduled run: the
// scheduled occurrences missed between it and now are run (run-all), and
// none from before it.
func TestCatchUpLooksPastATrigger(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	now := time.Now()
	m := now.Truncate(time.Minute) // "@every 1m" instants are whole minutes since the epoch
	record := func(at time.Time, version string) {
		t.Helper()
		o := backend.Owner{Instance: "old", Nonce: backend.NewNonce()}
		g, err := b.Claim(ctx, backend.ClaimRequest{Job: "job", ScheduledAt: at, SpecVersion: version, Owner: o, TTL: time.Minute, MaxEarly: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Finish(ctx, backend.FinishRequest{Job: "job", ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
			t.Fatal(err)
		}
	}
	last := m.Add(-5 * time.Minute)
	record(last, "v")                                                     // the latest scheduled run
	record(backend.Instant(now.Add(-10*time.Second)), "trigger:manual-1") // then a trigger
	fx := newEffects()
	s := newScheduler(t, b, "a")
	if err := s.Register(schedule.Job{Name: "job", Schedule: "@every 1m", Misfire: schedule.MisfireRunAll, MaxCatchUp: 10,
		Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	var want []int64
	for at := last.Add(time.Minute); !at.After(m); at = at.Add(time.Minute) {
		want = append(want, at.UnixMilli())
	}
	caughtUp := func() []int64 {
		var got []int64
		for _, k := range fx.instants() {
			if !time.UnixMilli(k).After(now) {
				got = append(got, k)
			}
		}
		return got
	}
	eventually.True(t, 10*time.Second, "the missed scheduled occurrences are caught up", func() bool { return len(fx.get(m)) == 1 })
	if got := caughtUp(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("caught up %v, want the %d instants after the latest scheduled run: %v", got, len(want), want)
	}
}

// TestIsTriggeredOfAScheduledRun: a scheduled run's record carries its spec
// version, which is not a trigger key; before the fix every scheduled run
// was reported as "run now: <version>" by the CLI, the API and the page.
func TestIsTriggeredOfAScheduledRun(t *testing.T) {
	for _, tc := range []struct {
		version string
		key     string
		ok      bool
	}{
		{version: "14763805e417753b"},
		{version: ""},
		{version: schedule.TriggerVersionPrefix + "manual-1", key: "manual-1", ok: true},
	} {
		key, ok := schedule.IsTriggered(backend.Run{SpecVersion: tc.version})
		if key != tc.key || ok != tc.ok {
			t.Errorf("IsTriggered(version %q) = %q, %v; want %q, %v", tc.version, key, ok, tc.key, tc.ok)
		}
	}
}

// TestTriggerHeldToMaxConcurrentAtOnce (found by review; the bug it shows): the new chaos fault "trigger"
// fires a burst of Trigger calls at a MaxConcurrent 1 job and the new
// checker rule fails a run where the job exceeds its max_concurrent. But
// Trigger claims under its own key with ClaimOccurrence, which sends no
// MaxRunning: every triggered run starts at once.
//
// It runs in a synctest bubble: each run's 300 ms, the window in which a
// second triggered run would overlap it, is virtual time.
func TestTriggerHeldToMaxConcurrentAtOnce(t *testing.T) {
	synctest.Test(t, triggerHeldToMaxConcurrentAtOnce)
}

// triggerHeldToMaxConcurrentAtOnce is TestTriggerHeldToMaxConcurrentAtOnce
// inside its bubble.
func triggerHeldToMaxConcurrentAtOnce(t *testing.T) {
	s := newScheduler(t, memory.New(), "a")
	var conc concurrency
	var ran atomic.Int64
	err := s.Register(schedule.Job{Name: "limited", Schedule: "@daily", MaxConcurrent: 1,
		Func: func(ctx context.Context, r schedule.Run) error {
			conc.enter()
			defer conc.leave()
			ran.Add(1)
			time.Sleep(300 * time.Millisecond)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Trigger(context.Background(), "limited", "k"+string(rune('a'+i)))
		}()
	}
	wg.Wait()
	eventually.True(t, 5*time.Second, "triggered runs", func() bool { return ran.Load() >= 1 && conc.cur.Load() == 0 })
	if p := conc.peak.Load(); p > 1 {
		t.Errorf("%d triggered runs of a MaxConcurrent 1 job ran at once", p)
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
