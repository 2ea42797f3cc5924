package schedule_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestPendingRetryHoldsItsSlot: under MaxConcurrent 1 a failed run waiting
// for its retry holds the job's slot — no later occurrence runs before the
// retry — and the retry starts when its backoff ends, not at a later
// sweep. Issue #28 item 7: once the backoff's lease lapsed, later
// occurrences took the slot, and the retry waited for a sweep that then
// met the limit. In synctest's virtual time.
func TestPendingRetryHoldsItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, err := schedule.New(b, schedule.WithInstance("a")) // sweeps every 5 s
		if err != nil {
			t.Fatal(err)
		}
		type start struct {
			at      time.Time
			attempt int
			when    time.Time
		}
		var (
			mu     sync.Mutex
			starts []start
			failed time.Time
		)
		const backoff = 2 * time.Second
		err = s.Register(schedule.Job{Name: "serial", Schedule: "@every 1s", MaxConcurrent: 1,
			Retry: schedule.RetryPolicy{Max: 1, Backoff: backoff},
			Func: func(_ context.Context, r schedule.Run) error {
				mu.Lock()
				defer mu.Unlock()
				starts = append(starts, start{r.ScheduledAt, r.Attempt, time.Now()})
				if len(starts) == 1 {
					failed = time.Now()
					return errors.New("first run fails")
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(12 * time.Second)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(starts) < 2 {
			t.Fatalf("runs: %+v", starts)
		}
		first := starts[0]
		for i, st := range starts[1:] {
			if st.at.Equal(first.at) {
				if st.attempt != 2 || i != 0 {
					t.Errorf("the retry is run %d (attempt %d); want the run right after the failure, attempt 2: %+v", i+1, st.attempt, starts)
				}
				if late := st.when.Sub(failed); late > backoff+100*time.Millisecond {
					t.Errorf("the retry started %v after the failure; want its backoff %v", late, backoff)
				}
				return
			}
			t.Errorf("occurrence %v ran (at %v) while the retry of %v waited for its slot", st.at, st.when, first.at)
		}
		t.Fatalf("the failed occurrence was never retried: %+v", starts)
	})
}
