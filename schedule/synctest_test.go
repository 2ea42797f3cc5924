package schedule_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestEveryInstantOnceInVirtualTime: three schedulers on one memory
// backend run an @every 1s job for 20 seconds of synctest's virtual clock
// (no real waiting, and no timing left to chance): every instant between
// the first and the last ran exactly once.
func TestEveryInstantOnceInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var mu sync.Mutex
		ran := map[time.Time][]string{}
		var scheds []*schedule.Scheduler
		for _, name := range []string{"a", "b", "c"} {
			s, err := schedule.New(b, schedule.WithInstance(name), schedule.WithSweepEvery(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Register(schedule.Job{Name: "tick", Schedule: "@every 1s", Func: func(_ context.Context, r schedule.Run) error {
				mu.Lock()
				ran[r.ScheduledAt] = append(ran[r.ScheduledAt], name)
				mu.Unlock()
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
		time.Sleep(20 * time.Second) // virtual: returns once every goroutine waits on the clock
		for _, s := range scheds {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			cancel()
		}
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		var first, last time.Time
		for at, on := range ran {
			if len(on) != 1 {
				t.Errorf("%v ran on %v", at, on)
			}
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		if len(ran) < 19 {
			t.Fatalf("%d instants ran in 20 virtual seconds; want at least 19", len(ran))
		}
		for at := first; !at.After(last); at = at.Add(time.Second) {
			if _, ok := ran[at]; !ok {
				t.Errorf("instant %v between the first and the last did not run", at)
			}
		}
	})
}
