package schedule_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// An Observer sees each claim, run, crash recovery and retention pass;
// package metrics turns them into Prometheus metrics.
func ExampleWithObserver() {
	done := make(chan struct{})
	var once sync.Once
	seen := schedule.ObserverFunc(func(ev schedule.Event) {
		if ev.Kind == schedule.EventClaim || ev.Kind == schedule.EventRun {
			fmt.Println(ev.Kind, ev.Job, ev.Result)
		}
		if ev.Kind == schedule.EventRun {
			once.Do(func() { close(done) })
		}
	})
	s, _ := schedule.New(memory.New(), schedule.WithObserver(seen))
	_ = s.Register(schedule.Job{Name: "report", Schedule: "@yearly",
		Func: func(context.Context, schedule.Run) error { return nil }})
	_ = s.Start(context.Background())
	_ = s.Trigger(context.Background(), "report", "manual-1")
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
	// Output:
	// claim report won
	// run report succeeded
}
