package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

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
