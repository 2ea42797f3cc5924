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

// TestReRegisterKeepsInstantsWithinGrace: a job removed and registered
// again (the daemon does so while its instance id is lost: a pause past the
// instance TTL) continues from the last instant it handled, so an instant
// that came due meanwhile, still within the misfire grace, runs; issue #28
// item 6: its timer restarted at "now" and the instant was lost, with
// nothing in the log. In synctest's virtual time.
func TestReRegisterKeepsInstantsWithinGrace(t *testing.T) {
	for _, policy := range []schedule.Misfire{schedule.MisfireSkip, schedule.MisfireRunOnce} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				s, err := schedule.New(b, schedule.WithInstance("a"))
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				ran := map[time.Time]bool{}
				job := schedule.Job{Name: "tick", Schedule: "@every 30s", Misfire: policy, MisfireGrace: 5 * time.Second,
					Func: func(_ context.Context, r schedule.Run) error {
						mu.Lock()
						ran[r.ScheduledAt] = true
						mu.Unlock()
						return nil
					}}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now().Truncate(30 * time.Second)
				if err := s.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				defer s.Shutdown(context.Background())
				time.Sleep(t0.Add(31 * time.Second).Sub(time.Now()))
				synctest.Wait()
				if err := s.Remove("tick"); err != nil { // the instance id is lost
					t.Fatal(err)
				}
				time.Sleep(t0.Add(62 * time.Second).Sub(time.Now())) // t0+60 falls due 2 s before it is held again
				if err := s.Replace(job); err != nil {
					t.Fatal(err)
				}
				time.Sleep(30 * time.Second)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				for _, at := range []time.Time{t0.Add(30 * time.Second), t0.Add(60 * time.Second), t0.Add(90 * time.Second)} {
					if !ran[at.UTC()] {
						t.Errorf("instant %v did not run; ran %v", at.UTC(), ran)
					}
				}
			})
		})
	}
}
