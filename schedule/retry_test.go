package schedule_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/schedule"
)

// TestRetryIsNoCrash: the retry of a failed run is logged and reported as
// a retry (EventRetry), not as the reclaim of an occurrence whose runner
// died (EventReclaim, counted in runs_recovered_total{action="reclaimed"});
// no log line carries a key twice; a failure that is final logs at WARN.
// Issue #28 item 5: a retry logged WARN "reclaimed an occurrence whose
// runner died" naming a live instance as the dead runner, with two attempt
// keys, and the final failure logged at INFO.
func TestRetryIsNoCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var logs testkit.Buffer
		var mu sync.Mutex
		kinds := map[schedule.EventKind]int{}
		s, err := schedule.New(b, schedule.WithInstance("web-3"),
			schedule.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
			schedule.WithObserver(schedule.ObserverFunc(func(ev schedule.Event) { mu.Lock(); kinds[ev.Kind]++; mu.Unlock() })))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Register(schedule.Job{Name: "flaky", Schedule: "@yearly", Retry: schedule.RetryPolicy{Max: 1, Backoff: time.Second},
			Func: func(context.Context, schedule.Run) error { return errors.New("boom") }})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Start(context.Background())
		if err := s.Trigger(context.Background(), "flaky", "k1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // the backoff, the retry and its final failure
		_ = s.Shutdown(context.Background())
		out := logs.String()
		mu.Lock()
		defer mu.Unlock()
		if kinds[schedule.EventReclaim] != 0 || kinds[schedule.EventRetry] != 1 {
			t.Errorf("events: %d reclaims, %d retries; want 0 and 1", kinds[schedule.EventReclaim], kinds[schedule.EventRetry])
		}
		if strings.Contains(out, "runner died") || strings.Contains(out, "dead runner") {
			t.Errorf("a retry is logged as a crash:\n%s", out)
		}
		final := false
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			seen := map[string]bool{}
			for _, f := range strings.Fields(line) {
				k, _, ok := strings.Cut(f, "=")
				if ok && !strings.HasPrefix(k, `"`) && seen[k] && !strings.Contains(k, `"`) {
					t.Errorf("key %q twice in: %s", k, line)
				}
				seen[k] = ok
			}
			if strings.Contains(line, "attempt=2") && strings.Contains(line, "boom") {
				final = true
				if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
					t.Errorf("the final failure is not logged at WARN or ERROR: %s", line)
				}
			}
		}
		if !final {
			t.Errorf("no log line of the final failure:\n%s", out)
		}
	})
}

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
