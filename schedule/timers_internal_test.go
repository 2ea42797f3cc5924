package schedule

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

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
