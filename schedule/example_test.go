package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

func ExampleParse() {
	// 02:30 in New York is skipped on 8 March 2026: the job runs once, at
	// the end of the gap (03:00 EDT = 07:00 UTC).
	s, _ := schedule.Parse("30 2 * * *", "America/New_York")
	at := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	for range 2 {
		at = s.Next(at)
		fmt.Println(at.Format(time.RFC3339), at.In(s.Zone()).Format("15:04 MST"))
	}
	// Output:
	// 2026-03-08T07:00:00Z 03:00 EDT
	// 2026-03-09T06:30:00Z 02:30 EDT
}

func ExampleScheduler() {
	b := memory.New() // every instance uses the same backend (sqlite, redis, ...)
	s, _ := schedule.New(b, leasehold.WithInstance("web-1"))
	done := make(chan schedule.Run, 1)
	err := s.Register(schedule.Job{
		Name:     "tick",
		Schedule: "@every 100ms",
		Func: func(ctx context.Context, r schedule.Run) error {
			// r.Token fences effects: pass it to a sink that rejects lower tokens.
			select {
			case done <- r:
			default:
			}
			return nil
		},
	})
	fmt.Println(err)
	_ = s.Start(context.Background())
	r := <-done
	_ = s.Shutdown(context.Background())
	fmt.Println(r.Job, r.Attempt, r.Token > 0, r.ScheduledAt.UnixMilli()%100)
	// Output:
	// <nil>
	// tick 1 true 0
}

func ExampleClaimOccurrence() {
	ctx := context.Background()
	b := memory.New()
	at := time.Now().Truncate(time.Minute)
	c, err := schedule.ClaimOccurrence(ctx, b, "nightly", at, schedule.ClaimOptions{Instance: "a"})
	fmt.Println(err)
	_, err = schedule.ClaimOccurrence(ctx, b, "nightly", at, schedule.ClaimOptions{Instance: "b"})
	fmt.Println(err != nil) // claimed once
	fmt.Println(c.Finish(ctx, nil))
	// Output:
	// <nil>
	// true
	// <nil>
}

func ExampleScheduler_Trigger() {
	ctx := context.Background()
	s, _ := schedule.New(memory.New())
	ran := make(chan string, 1)
	_ = s.Register(schedule.Job{Name: "report", Schedule: "@yearly",
		Func: func(ctx context.Context, r schedule.Run) error { ran <- r.Job; return nil }})
	_ = s.Start(ctx)
	fmt.Println(s.Trigger(ctx, "report", "manual-1"))
	fmt.Println(<-ran)
	fmt.Println(s.Trigger(ctx, "report", "manual-1") != nil) // the same key runs once
	_ = s.Shutdown(ctx)
	// Output:
	// <nil>
	// report
	// true
}

// The shutdown pattern: Start with the signal's context, defer Shutdown with
// the same context. At the signal nothing more is claimed; a running job is
// not cancelled but finishes within the grace period, and Shutdown waits for
// it (here cancel stands in for SIGTERM, from signal.NotifyContext).
func ExampleScheduler_Shutdown() {
	ctx, cancel := context.WithCancel(context.Background()) // signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	s, _ := schedule.New(memory.New(), schedule.WithGrace(10*time.Second))
	running := make(chan struct{})
	_ = s.Register(schedule.Job{Name: "report", Schedule: "@yearly",
		Func: func(ctx context.Context, r schedule.Run) error {
			close(running)
			time.Sleep(50 * time.Millisecond) // work that outlives the signal
			fmt.Println("job done, context:", ctx.Err())
			return nil
		}})
	_ = s.Start(ctx)
	_ = s.Trigger(ctx, "report", "now")
	<-running
	cancel() // SIGTERM
	fmt.Println(s.Shutdown(ctx))
	// Output:
	// job done, context: <nil>
	// <nil>
}
