package schedule

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// The sweeper lists every job's running records at once, a page at a
// time: expired runs of many jobs at one instant (every daily job at
// 03:00) fill pages that end inside that instant, and a page holding a
// single instant must be widened, or the runs past it would never be
// recovered (runs held for a retry, or live on another instance, stay
// running). A running record of a job not registered here is left alone.
func TestSweepRecoversExpiredRunsPastPagesOfOneInstant(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	shared := backend.Instant(time.Now().Add(-time.Minute))
	earlier := shared.Add(-time.Hour)
	type occ struct {
		job string
		at  time.Time
	}
	var dead []occ
	claimFor := func(job string, at time.Time, ttl time.Duration) {
		if _, err := b.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "dead",
			Owner: backend.Owner{Instance: "dead", Nonce: backend.NewNonce()}, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(job string, at time.Time) { claimFor(job, at, 150*time.Millisecond) }
	// Live runs at the same instant, listed before the dead ones (ties go
	// by job name): they stay running, so whole pages of them come first
	// at every sweep.
	for i := range 6 {
		claimFor(fmt.Sprintf("a-live-%d", i), shared, time.Minute)
	}
	for i := range 7 {
		dead = append(dead, occ{fmt.Sprintf("job-%d", i), shared})
		if i < 3 {
			dead = append(dead, occ{fmt.Sprintf("job-%d", i), earlier})
		}
	}
	for _, o := range dead {
		claim(o.job, o.at)
	}
	claim("not-registered", shared)
	eventually.True(t, 10*time.Second, "every lease above has expired (150 ms)", func() bool {
		for _, o := range append(dead, occ{"not-registered", shared}) {
			if r, err := b.GetRun(ctx, o.job, o.at); err != nil || !r.Expired {
				return false
			}
		}
		return true
	})

	s, err := New(b, WithInstance("sweeper"), WithSweepEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.sweepPage = 2 // 13 runs at one instant: pages of one instant, widened
	for i := range 7 {
		if err := s.Register(Job{Name: fmt.Sprintf("job-%d", i), Schedule: "@yearly", Crash: CrashSkip,
			Func: func(context.Context, Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
	})
	eventually.True(t, 10*time.Second, "every expired run of a registered job is abandoned", func() bool {
		for _, o := range dead {
			if r, err := b.GetRun(ctx, o.job, o.at); err != nil || r.State != backend.Abandoned {
				return false
			}
		}
		return true
	})
	if r, err := b.GetRun(ctx, "not-registered", shared); err != nil || r.State != backend.Running {
		t.Fatalf("a job not registered here: %+v, %v; want it left running", r, err)
	}
}

// An idle scheduler holds one timer for all its jobs, not a goroutine per
// job: once every job's start-up work is done, the goroutines it added do
// not grow with the number of jobs.
func TestIdleJobsHoldNoGoroutineEach(t *testing.T) {
	const jobs = 500
	before := runtime.NumGoroutine()
	s, err := New(memory.New(), WithInstance("idle"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if err := s.Register(Job{Name: fmt.Sprintf("job-%d", i), Schedule: "0 3 * * *",
			Func: func(context.Context, Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	select {
	case <-s.StartedUp():
	case <-time.After(30 * time.Second):
		t.Fatal("StartedUp not closed 30 s after Start")
	}
	s.timers.mu.Lock()
	waiting := len(s.timers.items)
	s.timers.mu.Unlock()
	if waiting != jobs {
		t.Fatalf("started up with %d jobs in the timer heap, want %d", waiting, jobs)
	}
	// Start-up goroutines end right after they add their entry.
	eventually.True(t, 10*time.Second, "the start-up goroutines have ended", func() bool {
		return runtime.NumGoroutine()-before < 20
	})
	s.timers.mu.Lock()
	next := s.timers.items[0].next
	s.timers.mu.Unlock()
	if want := s.jobs["job-0"].spec.Next(time.Now()); !next.Equal(want) {
		t.Fatalf("earliest timer at %v, want the daily instant %v", next, want)
	}
}

// listCounting counts ListRuns calls.
type listCounting struct {
	backend.Backend
	lists atomic.Int64
}

func (c *listCounting) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	c.lists.Add(1)
	return c.Backend.ListRuns(ctx, f)
}

// BenchmarkIdleSweep is one crash sweep of an idle scheduler (nothing
// running) with 100, 1,000 and 10,000 registered jobs on SQLite: its cost
// and its ListRuns calls must not grow with the jobs.
//
//	go test -run '^$' -bench IdleSweep ./schedule/
func BenchmarkIdleSweep(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "idle.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			lb := &listCounting{Backend: db}
			s, err := New(lb, WithInstance("idle"))
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := s.Register(Job{Name: fmt.Sprintf("job-%d", i), Schedule: "0 3 * * *",
					Func: func(context.Context, Run) error { return nil }}); err != nil {
					b.Fatal(err)
				}
			}
			lb.lists.Store(0)
			b.ResetTimer()
			for range b.N {
				s.sweep(ctx)
			}
			b.StopTimer()
			b.ReportMetric(float64(lb.lists.Load())/float64(b.N), "lists/sweep")
		})
	}
}
