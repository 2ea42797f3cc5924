package schedule_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestPauseIsClusterWide pauses a job through one instance and checks, from
// what the job itself wrote, that neither instance runs an occurrence after
// the pause, and that both may run again after Resume.
func TestPauseIsClusterWide(t *testing.T) {
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

// TestResignLeadership resigns the scheduler's leadership and checks that
// the other instance takes it.
func TestResignLeadership(t *testing.T) {
	b := memory.New()
	var scheds []*schedule.Scheduler
	for _, name := range []string{"a", "b"} {
		s := newScheduler(t, b, name)
		if err := s.Register(schedule.Job{Name: "lead", Schedule: "@every 1h", Mode: schedule.Leader,
			Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		scheds = append(scheds, s)
	}
	leader := func() *schedule.Scheduler {
		for _, s := range scheds {
			if ok, _, _ := s.Leadership(); ok {
				return s
			}
		}
		return nil
	}
	eventually.True(t, 10*time.Second, "a leader", func() bool { return leader() != nil })
	first := leader()
	_, _, tok1 := first.Leadership()
	for _, s := range scheds {
		if s != first {
			if ok, err := s.ResignLeadership(context.Background()); ok || err != nil {
				t.Fatalf("a non-leader resigned: %v, %v", ok, err)
			}
		}
	}
	if ok, err := first.ResignLeadership(context.Background()); !ok || err != nil {
		t.Fatalf("ResignLeadership = %v, %v", ok, err)
	}
	eventually.True(t, 10*time.Second, "the other instance leading", func() bool { l := leader(); return l != nil && l != first })
	_, _, tok2 := leader().Leadership()
	if tok2 <= tok1 {
		t.Fatalf("new leader's token %v is not greater than %v", tok2, tok1)
	}
}
