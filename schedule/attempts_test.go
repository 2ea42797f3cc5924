package schedule_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestRetriedFailuresAreRecorded: each failed attempt that is retried
// leaves a record under AttemptKey — its runner, its token, its error and
// output — which the occurrence's own record (the last attempt's) would
// otherwise overwrite. In synctest's virtual time.
func TestRetriedFailuresAreRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, err := schedule.New(b, schedule.WithInstance("a"))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu     sync.Mutex
			tokens = map[int]uint64{}
			at     time.Time
		)
		err = s.Register(schedule.Job{Name: "j", Schedule: "@every 1h", Retry: schedule.RetryPolicy{Max: 2, Backoff: time.Second},
			Func: func(_ context.Context, r schedule.Run) error {
				mu.Lock()
				defer mu.Unlock()
				if at.IsZero() {
					at = r.ScheduledAt
				}
				if !r.ScheduledAt.Equal(at) {
					return nil
				}
				tokens[r.Attempt] = uint64(r.Token)
				r.Report("output of attempt " + strconv.Itoa(r.Attempt))
				return fmt.Errorf("attempt %d failed", r.Attempt)
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Hour) // virtual: the first occurrence and its two retries end
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		l := schedule.NamespaceLedger(b, "default")
		ctx := context.Background()
		run, err := l.GetRun(ctx, "j", at)
		if err != nil || run.Attempt != 3 || run.State != backend.Failed || run.Error != "attempt 3 failed" {
			t.Fatalf("the occurrence: %+v, %v", run, err)
		}
		for n := 1; n <= 2; n++ {
			a, err := schedule.ReadAttempt(ctx, l, "j", n, at)
			if err != nil {
				t.Fatalf("attempt %d: %v", n, err)
			}
			want := strconv.FormatUint(tokens[n], 10)
			if a.State != backend.Failed || a.Error != fmt.Sprintf("attempt %d failed", n) || a.Result != "output of attempt "+strconv.Itoa(n) ||
				a.Owner.Instance != "a" || a.SpecVersion != want {
				t.Errorf("attempt %d recorded as %+v; want failed by a, token %s", n, a, want)
			}
		}
		if _, err := schedule.ReadAttempt(ctx, l, "j", 3, at); err == nil {
			t.Error("the last attempt has a record of its own: it is the occurrence's")
		}
		// Not runs: a listing of every job leaves them out.
		all, err := l.ListRuns(ctx, backend.RunFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if r.Job != "j" {
				t.Errorf("listed %s among the runs", r.Job)
			}
		}
	})
}

func ExampleAttemptKey() {
	// The ledger name of the record of attempt 1 of job "report", when
	// that attempt failed and was retried.
	fmt.Println(schedule.AttemptKey("report", 1))
	// Output: report!attempt!1
}
