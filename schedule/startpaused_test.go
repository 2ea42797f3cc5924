package schedule_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestStartPausedIsThePauseState: a job registered with StartPaused reads
// as paused and refuses triggers until Resume; the state recorded then
// rules, for a restarted instance with StartPaused too.
func TestStartPausedIsThePauseState(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	ran := make(chan struct{}, 10)
	job := schedule.Job{Name: "tick", Schedule: "@yearly", StartPaused: true,
		Func: func(context.Context, schedule.Run) error { ran <- struct{}{}; return nil }}
	s := newScheduler(t, b, "a")
	if err := s.Register(job); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	if p, err := s.Paused(ctx, "tick"); err != nil || !p {
		t.Fatalf("Paused = %v, %v; want true before any Resume", p, err)
	}
	if err := s.Trigger(ctx, "tick", "k1"); !errors.Is(err, schedule.ErrJobPaused) {
		t.Fatalf("Trigger of a job paused at start = %v, want ErrPaused", err)
	}
	if err := s.Resume(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Paused(ctx, "tick"); err != nil || p {
		t.Fatalf("Paused after Resume = %v, %v; want false", p, err)
	}
	if err := s.Trigger(ctx, "tick", "k1"); err != nil {
		t.Fatalf("Trigger after Resume: %v", err)
	}
	<-ran
	// Another instance (a restart) with the same StartPaused job: the
	// recorded "resumed" rules.
	s2 := newScheduler(t, b, "b")
	if err := s2.Register(job); err != nil {
		t.Fatal(err)
	}
	if p, err := s2.Paused(ctx, "tick"); err != nil || p {
		t.Fatalf("a restarted instance: Paused = %v, %v; want false (resumed was recorded)", p, err)
	}
	// Pause and Resume work as for any job.
	if err := s2.Pause(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Paused(ctx, "tick"); err != nil || !p {
		t.Fatalf("after Pause: Paused = %v, %v; want true", p, err)
	}
}
