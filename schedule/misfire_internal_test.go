package schedule

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
)

// TestDueSinceAfterHugeStepIsBounded: dueSince bounds a forward step
// by the misfire window, but then lists every instant in the window — a
// valid job (@every 10ms, MisfireWindow 24h < the 7-day retention) after a
// pause or step of a day allocates 8.6 million instants in one slice, on
// every such wake-up, although under skip all but the last are dropped and
// run-all keeps at most MaxCatchUp.
func TestDueSinceAfterHugeStepIsBounded(t *testing.T) {
	s, err := New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(Job{Name: "j", Schedule: "@every 10ms", MisfireWindow: 24 * time.Hour,
		Func: func(context.Context, Run) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	e := s.jobs["j"]
	at := time.Now().Truncate(time.Second)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	onTime, late, _ := s.dueSince(e, at, at.Add(25*time.Hour))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	n := len(onTime) + len(late.latest)
	t.Logf("%d instants kept of %d late, %v, %d MB allocated", n, late.n, took, alloc>>20)
	if n > 10000 || alloc > 64<<20 || took > 2*time.Second {
		t.Errorf("one late wake-up kept %d instants, allocated %d MB and took %v", n, alloc>>20, took)
	}
	if want := int((24*time.Hour - 5*time.Second) / (10 * time.Millisecond)); late.n < want*9/10 || late.n > want*11/10 {
		t.Errorf("late count %d, want about %d", late.n, want)
	}
}
