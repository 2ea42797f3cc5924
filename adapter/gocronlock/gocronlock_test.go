package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/adapter/gocronlock"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// slow delays Lock like a scheduler whose timer fires late (GC, load).
type slow struct {
	gocron.Locker
	d time.Duration
}

func (s slow) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	time.Sleep(s.d) // the late timer being simulated
	return s.Locker.Lock(ctx, key)
}

// byName is the naive locker gocron users write: a lock on the job name,
// released when the job returns. It is the control that shows the hole.
type byName struct{ lk *leasehold.Locker }

func (n byName) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := n.lk.TryAcquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return release{l}, nil
}

type release struct{ l *leasehold.Lock }

func (r release) Unlock(ctx context.Context) error { return r.l.Release(ctx) }

// runCluster runs 3 gocron schedulers, started 170 ms apart, each firing a
// fast per-second cron job; the third scheduler's timer is 300 ms late. It
// returns how many times each second's occurrence ran. perJob gives the
// locker to the job (gocron.WithDistributedJobLocker) instead of the
// scheduler (gocron.WithDistributedLocker).
func runCluster(t *testing.T, perJob bool, locker func(i int) gocron.Locker) map[int64]int {
	t.Helper()
	var mu sync.Mutex
	ran := map[int64]int{}
	var scheds []gocron.Scheduler
	for i := range 3 {
		base := locker(i)
		l := base
		if i == 2 {
			l = slow{l, 300 * time.Millisecond}
		}
		var sopts []gocron.SchedulerOption
		jopts := []gocron.JobOption{gocron.WithName("report")}
		if perJob {
			jopts = append(jopts, gocron.WithDistributedJobLocker(l))
		} else {
			sopts = append(sopts, gocron.WithDistributedLocker(l))
		}
		s, err := gocron.NewScheduler(sopts...)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := base.(interface{ Attach(gocron.Scheduler) }); ok {
			a.Attach(s) // the unwrapped locker, which Lock (through slow) is called on
		}
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
			mu.Lock()
			ran[time.Now().Add(-400*time.Millisecond).Round(time.Second).Unix()]++
			mu.Unlock()
		}), jopts...)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		scheds = append(scheds, s)
		time.Sleep(170 * time.Millisecond) // skewed start times are the point of the test
	}
	// Enough occurrences, or 10 s: the callers judge how many ran.
	eventually.Within(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) >= 5
	})
	for _, s := range scheds {
		_ = s.Shutdown()
	}
	mu.Lock()
	defer mu.Unlock()
	return ran
}

func TestOccurrenceLockerRunsEachOnce(t *testing.T) {
	b := memory.New()
	ran := runCluster(t, false, func(i int) gocron.Locker {
		l, err := gocronlock.NewLocker(b, "node"+string(rune('a'+i)), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	if len(ran) < 5 {
		t.Fatalf("only %d occurrences ran", len(ran))
	}
	for sec, n := range ran {
		if n != 1 {
			t.Fatalf("occurrence %v ran %d times", time.Unix(sec, 0).UTC(), n)
		}
	}
}

func TestJobLockerRunsEachOnce(t *testing.T) {
	b := memory.New()
	ran := runCluster(t, true, func(i int) gocron.Locker {
		l, err := gocronlock.NewJobLocker(b, "node"+string(rune('a'+i)), "* * * * * *", "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	if len(ran) < 5 {
		t.Fatalf("only %d occurrences ran", len(ran))
	}
	for sec, n := range ran {
		if n != 1 {
			t.Fatalf("occurrence %v ran %d times", time.Unix(sec, 0).UTC(), n)
		}
	}
}

func TestNameLockerRunsTwice(t *testing.T) {
	b := memory.New()
	ran := runCluster(t, false, func(i int) gocron.Locker {
		lk, err := leasehold.NewLocker(b, leasehold.WithInstance("node"+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		return byName{lk}
	})
	dups := 0
	for _, n := range ran {
		if n > 1 {
			dups++
		}
	}
	if dups == 0 {
		t.Fatalf("the name-keyed control showed no duplicate (%v): the test cannot see the hole it claims to close", ran)
	}
	t.Logf("name-keyed lock: %d of %d occurrences ran more than once", dups, len(ran))
}

func TestElector(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	a, err := gocronlock.NewElector(ctx, b, "gocron", leasehold.WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	eventually.True(t, time.Until(deadline), "a leads", func() bool { return a.IsLeader(ctx) == nil })
	c, _ := gocronlock.NewElector(ctx, b, "gocron", leasehold.WithInstance("c"))
	if err := c.IsLeader(ctx); !errors.Is(err, gocronlock.ErrElectorNotLeader) {
		t.Fatalf("c.IsLeader = %v while a leads", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Until(deadline), "c took over", func() bool { return c.IsLeader(ctx) == nil })
	_ = c.Close(ctx)
}

func ExampleNewLocker() {
	b := memory.New() // in production: a backend the instances share (sqlite, redis, ...)
	l, _ := gocronlock.NewLocker(b, "web-1", time.Minute, gocronlock.WithNamespace("billing"))
	s, _ := gocronlock.NewScheduler(l) // gocron.WithDistributedLocker(l), with l attached
	j, err := s.NewJob(gocron.CronJob("0 2 * * *", false), gocron.NewTask(func(ctx context.Context) {
		run, err := l.Run(ctx) // the claimed occurrence, while the job runs
		if err == nil {
			_ = run.Token // pass the fencing token to the sink
		}
	}), gocron.WithName("report"), gocron.WithSingletonMode(gocron.LimitModeReschedule))
	fmt.Println(j.Name(), err)
	s.Start()
	_ = s.Shutdown()
	// Output: report <nil>
}

func ExampleNewJobLocker() {
	b := memory.New() // in production: a backend the instances share (sqlite, redis, ...)
	l, _ := gocronlock.NewJobLocker(b, "web-1", "0 2 * * *", "Europe/Berlin")
	s, _ := gocron.NewScheduler()
	l.Attach(s)
	// l.CronJob() is gocron.CronJob("TZ=Europe/Berlin 0 2 * * *", false): the spec is written once.
	j, err := s.NewJob(l.CronJob(), gocron.NewTask(func() { /* the 2 a.m. report */ }),
		gocron.WithName("report"), gocron.WithDistributedJobLocker(l))
	fmt.Println(j.Name(), err)
	s.Start()
	_ = s.Shutdown()
	// Output: report <nil>
}

func ExampleNewElector() {
	ctx := context.Background()
	b := memory.New() // in production: a backend the instances share
	el, err := gocronlock.NewElector(ctx, b, "gocron/scheduler", leasehold.WithInstance("web-1"))
	if err != nil {
		panic(err)
	}
	defer el.Close(ctx)
	// Only the leader's scheduler runs jobs.
	s, _ := gocron.NewScheduler(gocron.WithDistributedElector(el))
	defer s.Shutdown()
	deadline := time.Now().Add(5 * time.Second)
	for el.IsLeader(ctx) != nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the campaign runs in the background
	}
	fmt.Println("leading:", el.IsLeader(ctx) == nil)
	// Output: leading: true
}

// shutdownDuringARun runs a per-second gocron job over b that runs until
// its context ends, and shuts the scheduler down while the job runs
// (gocron cancels the jobs' context first, then waits for them). It
// returns Shutdown's error.
func shutdownDuringARun(t *testing.T, b backend.Ledger, opts ...gocronlock.Option) error {
	t.Helper()
	l, err := gocronlock.NewLocker(b, "a", time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gocronlock.NewScheduler(l)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func(ctx context.Context) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done() // Shutdown has begun
	}), gocron.WithName("report"))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start in 30 s")
	}
	return s.Shutdown()
}

// TestRunningAtShutdownIsRecordedFinished: gocron unlocks a job that runs
// through Shutdown with a context Shutdown has already cancelled. The
// run's outcome must still be recorded: a run left "running" is taken for
// a dead runner's once its lease expires, and retried or abandoned.
func TestRunningAtShutdownIsRecordedFinished(t *testing.T) {
	b := memory.New()
	if err := shutdownDuringARun(t, b); err != nil {
		t.Fatal(err)
	}
	runs, err := b.ListRuns(context.Background(), backend.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no run recorded")
	}
	for _, r := range runs {
		if r.State == backend.Running {
			t.Errorf("run %s at %v (token %d) still recorded running after Shutdown returned", r.Job, r.ScheduledAt, r.Token)
		}
	}
}

// TestShutdownWithAnUnansweringLedgerIsBounded: the outcome of a run that
// ran through Shutdown is written without Shutdown's cancellation, but for
// a bounded time: a ledger that never answers must not make Shutdown fail
// with gocron's stop timeout (10 s by default), and the lost outcome is
// logged (gocron drops Unlock's error).
func TestShutdownWithAnUnansweringLedgerIsBounded(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	var stalled atomic.Bool
	b := &faultbackend.Backend{Next: mem,
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			stalled.Store(true)
			<-ctx.Done() // the ledger never answers
			return fmt.Errorf("no answer: %w", ctx.Err())
		}}
	var logs testkit.Buffer
	if err := shutdownDuringARun(t, b, gocronlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))); err != nil {
		t.Fatalf("Shutdown with a ledger that does not answer the run's Finish: %v", err)
	}
	if !stalled.Load() {
		t.Fatal("the run's Finish was never called")
	}
	if !strings.Contains(logs.String(), "outcome may not be recorded") {
		t.Errorf("the unrecorded outcome was not logged; log:\n%s", logs.String())
	}
}

// TestSlowOutcomeWriteOutsideShutdownIsRecorded: the short bound on the
// outcome's write is for Shutdown only. A run that ends while the
// scheduler runs has its outcome written for as long as its lease allows:
// a write 7 s slow (a loaded database) is recorded, not given up on.
func TestSlowOutcomeWriteOutsideShutdownIsRecorded(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	var first atomic.Bool
	b := &faultbackend.Backend{Next: mem,
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			if first.CompareAndSwap(false, true) {
				select {
				case <-time.After(7 * time.Second):
				case <-ctx.Done():
					return fmt.Errorf("no answer: %w", ctx.Err())
				}
			}
			return next(ctx, req)
		}}
	l, err := gocronlock.NewLocker(b, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gocronlock.NewScheduler(l)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {}), gocron.WithName("report"))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
	// The first run's outcome is the slow write; later runs' are not.
	eventually.True(t, 60*time.Second, "the first run's outcome, written 7 s late, is recorded", func() bool {
		runs, err := mem.ListRuns(context.Background(), backend.RunFilter{})
		if err != nil || len(runs) == 0 {
			return false
		}
		firstRun := runs[0]
		for _, r := range runs {
			if r.ScheduledAt.Before(firstRun.ScheduledAt) {
				firstRun = r
			}
		}
		return firstRun.State == backend.Succeeded
	})
	if !first.Load() {
		t.Fatal("the slow write was never made")
	}
}
