package schedule_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestPauseIsClusterWide pauses a job through one instance and checks, from
// what the job itself wrote, that neither instance runs an occurrence after
// the pause, and that both may run again after Resume.
//
// It runs in a synctest bubble: "one interval" of grace for claims under
// way and the ten quiet intervals after it are virtual time, so a loaded
// machine cannot stretch a claim in flight past them.
func TestPauseIsClusterWide(t *testing.T) {
	synctest.Test(t, pauseIsClusterWide)
}

// pauseIsClusterWide is TestPauseIsClusterWide inside its bubble.
func pauseIsClusterWide(t *testing.T) {
	b := memory.New()
	fx := newEffects()
	var scheds []*schedule.Scheduler
	for _, name := range []string{"a", "b"} {
		s := newScheduler(t, b, name)
		if err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 50ms", Func: func(_ context.Context, r schedule.Run) error {
			fx.add(r)
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		scheds = append(scheds, s)
	}
	ctx := context.Background()
	eventually.True(t, 10*time.Second, "a first run", func() bool { return fx.count() > 0 })

	if err := scheds[0].Pause(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	for _, s := range scheds {
		if p, err := s.Paused(ctx, "tick"); err != nil || !p {
			t.Fatalf("%s: Paused = %v, %v; want true", s.Instance(), p, err)
		}
	}
	// Claims that were under way at the pause may still land within one
	// interval; after that, none for ten more intervals.
	quiet := pausedAt.Add(100 * time.Millisecond)
	eventually.True(t, 10*time.Second, "ten intervals after the pause", func() bool { return time.Since(quiet) > 500*time.Millisecond })
	for _, k := range fx.instants() {
		if at := time.UnixMilli(k); at.After(quiet) {
			t.Fatalf("occurrence %s ran after the pause at %s (by %v)", at.Format(time.RFC3339Nano), pausedAt.Format(time.RFC3339Nano), fx.get(at))
		}
	}

	if err := scheds[1].Resume(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	eventually.True(t, 10*time.Second, "a run after Resume", func() bool {
		ks := fx.instants()
		return len(ks) > 0 && time.UnixMilli(ks[len(ks)-1]).After(resumed)
	})
	if p, err := scheds[0].Paused(ctx, "tick"); err != nil || p {
		t.Fatalf("Paused after Resume = %v, %v; want false", p, err)
	}
	if err := scheds[0].Pause(ctx, "nope"); !errors.Is(err, schedule.ErrJobNotFound) {
		t.Fatalf("Pause(unknown) = %v; want ErrUnknownJob", err)
	}
}

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
