package schedule_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestReplaceRemoveChurnNeverDoublesNorLosesAJob: a job replaced, removed
// and registered again under the same name while its instants come due
// (a SIGHUP reload storm) never runs one instant twice — two timers for
// one name would — and still runs once the churn ends.
func TestReplaceRemoveChurnNeverDoublesNorLosesAJob(t *testing.T) {
	s, err := schedule.New(memory.New(), schedule.WithInstance("i1"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type occ struct {
		job string
		at  time.Time
	}
	runs := map[occ]int{}
	var latest time.Time
	job := schedule.Job{Name: "churn", Schedule: "@every 20ms", Mode: schedule.EveryInstance,
		Func: func(_ context.Context, r schedule.Run) error {
			mu.Lock()
			defer mu.Unlock()
			runs[occ{r.Job, r.ScheduledAt}]++
			if r.Job == "churn" && r.ScheduledAt.After(latest) {
				latest = r.ScheduledAt
			}
			return nil
		}}
	if err := s.Register(job); err != nil {
		t.Fatal(err)
	}
	other := job
	other.Name = "other"
	if err := s.Register(other); err != nil { // shares the timer heap
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	for i := range 300 {
		switch i % 3 {
		case 0, 1:
			if err := s.Replace(job); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := s.Remove("churn"); err != nil {
				t.Fatal(err)
			}
			if err := s.Register(job); err != nil {
				t.Fatal(err)
			}
		}
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // let instants come due between bursts
		}
	}
	ended := time.Now()
	eventually.True(t, 10*time.Second, "a run of the job after the churn", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return latest.After(ended)
	})
	mu.Lock()
	defer mu.Unlock()
	for o, n := range runs {
		if n > 1 {
			t.Errorf("job %s's instant %v ran %d times on one instance", o.job, o.at, n)
		}
	}
}
