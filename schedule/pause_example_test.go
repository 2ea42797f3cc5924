package schedule_test

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

func ExampleScheduler_Pause() {
	b := memory.New() // shared by every instance
	ctx := context.Background()
	noop := func(context.Context, schedule.Run) error { return nil }
	web1, _ := schedule.New(b, leasehold.WithInstance("web-1"))
	web2, _ := schedule.New(b, leasehold.WithInstance("web-2"))
	for _, s := range []*schedule.Scheduler{web1, web2} {
		_ = s.Register(schedule.Job{Name: "report", Schedule: "@hourly", Func: noop})
	}
	// Paused through one instance, paused for every instance of the
	// namespace: the state is kept in the backend.
	_ = web1.Pause(ctx, "report")
	paused, _ := web2.Paused(ctx, "report")
	fmt.Println("paused on web-2:", paused)
	_ = web2.Resume(ctx, "report")
	paused, _ = web1.Paused(ctx, "report")
	fmt.Println("paused on web-1:", paused)
	// Output:
	// paused on web-2: true
	// paused on web-1: false
}
