package gocronlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/leasehold/leasehold/adapter/gocronlock"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

type lockErrs struct {
	mu   sync.Mutex
	errs []error
	ran  int
	log  testkit.Buffer // the Lockers' log
}

func (e *lockErrs) wait(t *testing.T, n int) {
	t.Helper()
	var got int
	if !eventually.Within(10*time.Second, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		got = len(e.errs)
		return got >= n
	}) {
		e.mu.Lock()
		ran := e.ran
		e.mu.Unlock()
		t.Fatalf("%d of %d lock refusals within 10 s (the job ran %d times)", got, n, ran)
	}
}

// startTwo starts two schedulers 400 ms apart sharing b, each with the
// scheduler-wide Locker of lockerOpts and one job defined by def.
func startTwo(t *testing.T, b backend.Ledger, def func(l *gocronlock.Locker) gocron.JobDefinition, perJob bool) *lockErrs {
	t.Helper()
	e := &lockErrs{}
	for i, name := range []string{"a", "b"} {
		var l *gocronlock.Locker
		var err error
		if perJob {
			l, err = gocronlock.NewJobLocker(b, name, "*/2 * * * * *", "", gocronlock.WithLogger(slog.New(slog.NewTextHandler(&e.log, nil))))
		} else {
			l, err = gocronlock.NewLocker(b, name, time.Second, gocronlock.WithLogger(slog.New(slog.NewTextHandler(&e.log, nil))))
		}
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocronlock.NewScheduler(l)
		if err != nil {
			t.Fatal(err)
		}
		opts := []gocron.JobOption{gocron.WithName("report"), gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			e.mu.Lock()
			e.errs = append(e.errs, err)
			e.mu.Unlock()
		}))}
		if perJob {
			l.Attach(s)
			opts = append(opts, gocron.WithDistributedJobLocker(l))
		}
		if _, err := s.NewJob(def(l), gocron.NewTask(func() { e.mu.Lock(); e.ran++; e.mu.Unlock() }), opts...); err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
		if i == 0 {
			time.Sleep(400 * time.Millisecond) // the second scheduler starts later: a DurationJob's instants differ
		}
	}
	return e
}

// A gocron DurationJob counts from each scheduler's start: under a
// scheduler-wide Locker two schedulers named one occurrence differently and
// both ran it. Lock must refuse it, say why in the log, and never run it.
func TestDurationJobRefused(t *testing.T) {
	e := startTwo(t, memory.New(), func(*gocronlock.Locker) gocron.JobDefinition {
		return gocron.DurationJob(700 * time.Millisecond)
	}, false)
	e.wait(t, 4)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, err := range e.errs {
		if !errors.Is(err, gocronlock.ErrJobDurationBased) {
			t.Fatalf("Lock refused with %v, want ErrJobDurationBased", err)
		}
	}
	if e.ran != 0 {
		t.Fatalf("the DurationJob ran %d times", e.ran)
	}
	if n := strings.Count(e.log.String(), "level=ERROR"); n != 2 || !strings.Contains(e.log.String(), "DurationJob") {
		t.Fatalf("log %q: want one ERROR per scheduler naming DurationJob", e.log.String())
	}
}

// The spec is written twice, in NewJobLocker and gocron.CronJob: a job
// whose spec differs from its Locker's is refused.
func TestSpecMismatchRefused(t *testing.T) {
	e := startTwo(t, memory.New(), func(*gocronlock.Locker) gocron.JobDefinition {
		return gocron.CronJob("* * * * * *", true) // the Locker's is */2
	}, true)
	e.wait(t, 2)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !errors.Is(e.errs[0], gocronlock.ErrJobSpecMismatch) || e.ran != 0 {
		t.Fatalf("Lock = %v (ran %d), want ErrJobSpecMismatch", e.errs[0], e.ran)
	}
}

// A quantum Locker refuses a job with instants between its multiples.
func TestQuantumMismatchRefused(t *testing.T) {
	b := memory.New()
	l, _ := gocronlock.NewLocker(b, "a", time.Minute)
	s, _ := gocronlock.NewScheduler(l)
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {}), gocron.WithName("report")); err != nil {
		t.Fatal(err)
	}
	_, err := l.Lock(context.Background(), "report")
	if !errors.Is(err, gocronlock.ErrJobSpecMismatch) {
		t.Fatalf("Lock of a per-second job under a 1m quantum = %v, want ErrJobSpecMismatch", err)
	}
}

func TestNotAttachedRefused(t *testing.T) {
	l, _ := gocronlock.NewLocker(memory.New(), "a", time.Second)
	if _, err := l.Lock(context.Background(), "report"); !errors.Is(err, gocronlock.ErrLockerNotAttached) {
		t.Fatalf("Lock without a scheduler = %v, want ErrLockerNotAttached", err)
	}
}

// l.CronJob() writes the spec once; the job runs, sees its token through
// Run, in its namespace.
func TestCronJobTokenNamespace(t *testing.T) {
	b := memory.New()
	l, err := gocronlock.NewJobLocker(b, "a", "* * * * * *", "", gocronlock.WithNamespace("billing"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := gocron.NewScheduler()
	l.Attach(s)
	got := make(chan schedule.Run, 1)
	if _, err := s.NewJob(l.CronJob(), gocron.NewTask(func(ctx context.Context) {
		run, err := l.Run(ctx)
		if err != nil {
			t.Errorf("Run in the job = %v", err)
		}
		select {
		case got <- run:
		default:
		}
	}), gocron.WithName("report"), gocron.WithDistributedJobLocker(l), gocron.WithSingletonMode(gocron.LimitModeReschedule)); err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
	var run schedule.Run
	select {
	case run = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run within 10 s")
	}
	if run.Token == 0 || run.Job != "gocron/report" {
		t.Fatalf("Run = %+v, want job gocron/report with a token", run)
	}
	runs, err := schedule.NamespaceLedger(b, "billing").ListRuns(context.Background(), backend.RunFilter{Job: "gocron/report"})
	if err != nil || len(runs) == 0 || runs[len(runs)-1].Token != uint64(run.Token) {
		t.Fatalf("the billing namespace's runs = %+v, %v; want the first with token %v", runs, err, run.Token)
	}
	if _, err := l.Run(context.Background()); !errors.Is(err, gocronlock.ErrRunNotFound) {
		t.Fatalf("Run outside a job = %v, want ErrRunNotFound", err)
	}
}

func TestJobLockerRefusesEvery(t *testing.T) {
	if _, err := gocronlock.NewJobLocker(memory.New(), "a", "@every 1m", ""); !errors.Is(err, gocronlock.ErrJobDurationBased) {
		t.Fatalf("NewJobLocker(@every 1m) = %v, want ErrJobDurationBased", err)
	}
}
