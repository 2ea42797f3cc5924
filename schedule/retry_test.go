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
