package schedule

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
)

// TestHandedBackSettledMeanwhileNotClaimed: an instant handed back at
// Remove whose claim, under way then, settled afterwards (marked done) is
// left alone by the job registered again — no second claim, no second
// run; and one not settled is claimed. In synctest's virtual time.
func TestHandedBackSettledMeanwhileNotClaimed(t *testing.T) {
	for _, settled := range []bool{true, false} {
		t.Run(fmt.Sprintf("settled=%v", settled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				var mu sync.Mutex
				claims := map[time.Time]int{}
				s, err := New(b, WithInstance("a"), WithObserver(ObserverFunc(func(ev Event) {
					if ev.Kind == EventClaim {
						mu.Lock()
						claims[ev.ScheduledAt]++
						mu.Unlock()
					}
				})))
				if err != nil {
					t.Fatal(err)
				}
				job := Job{Name: "tick", Schedule: "@every 1m", Jitter: 40 * time.Second,
					Func: func(context.Context, Run) error { return nil }}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now().Truncate(time.Minute)
				if err := s.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				defer s.Shutdown(context.Background())
				at := t0.Add(time.Minute).UTC()
				time.Sleep(at.Sub(time.Now()))
				synctest.Wait()
				if err := s.Remove("tick"); err != nil {
					t.Fatal(err)
				}
				s.mu.Lock()
				handed := s.removed["tick"].waiting
				s.mu.Unlock()
				if len(handed) != 1 || !handed[0].at.Equal(at) {
					t.Fatalf("handed back %v, want the instant %v", handed, at)
				}
				if settled {
					handed[0].done.Store(true) // as the claim under way at Remove would
				}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				time.Sleep(job.Jitter)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				want := 1
				if settled {
					want = 0
				}
				if claims[at] != want {
					t.Errorf("settled meanwhile %v: %d claims of %v after registering again, want %d", settled, claims[at], at, want)
				}
				s.mu.Lock()
				e := s.jobs["tick"]
				s.mu.Unlock()
				e.waits.mu.Lock()
				n := len(e.waits.items)
				e.waits.mu.Unlock()
				if n != 0 {
					t.Errorf("%d instants still held after their claims settled", n)
				}
			})
		})
	}
}
