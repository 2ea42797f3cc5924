package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestHTTPJobWithoutTimeoutEnds (issue 15 item 9): an HTTP job without a
// timeout whose endpoint never answers kept its run open forever, and with
// max_concurrent: 1 no later occurrence could run. It must end at the
// default bound, recorded as failed with an error that says it timed out,
// and the next occurrence must then be claimed and run.
func TestHTTPJobWithoutTimeoutEnds(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-r.Context().Done() // never answers; ends when the client gives up
	}))
	t.Cleanup(srv.Close)
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })

	j := &JobConfig{Name: "hook", HTTP: &HTTPJob{Method: "GET", URL: srv.URL + "/hook"}}
	const bound = 300 * time.Millisecond
	s, err := schedule.New(mem, schedule.WithInstance("a"), schedule.WithSweepEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(schedule.Job{Name: "hook", Schedule: "* * * * * *", MaxConcurrent: 1, LeaseTTL: 2 * time.Second,
		Func: httpFunc(j, &http.Client{}, redact.NewScrubber(), bound)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})

	// Two occurrences finished: the first hung request ended the run and
	// released the single slot for the next.
	var runs []backend.Run
	if !eventually.Within(20*time.Second, func() bool {
		runs, err = mem.ListRuns(context.Background(), backend.RunFilter{Job: "hook", State: backend.Failed})
		return err == nil && len(runs) >= 2
	}) {
		all, _ := mem.ListRuns(context.Background(), backend.RunFilter{Job: "hook"})
		t.Fatalf("fewer than two runs of the hanging HTTP job failed within 20s (%d requests): %+v", calls.Load(), all)
	}
	for _, r := range runs {
		if r.Attempt != 1 || !strings.Contains(r.Error, "timed out after 300ms") || !strings.Contains(r.Error, "no answer") {
			t.Fatalf("run %s: attempt %d error %q, want attempt 1 failed with a timeout after 300ms", r.ScheduledAt, r.Attempt, r.Error)
		}
	}
}

// TestHTTPTimeoutDefault: an HTTP job's bound is its timeout, else
// DefaultHTTPTimeout.
func TestHTTPTimeoutDefault(t *testing.T) {
	if got := httpTimeout(&JobConfig{}); got != DefaultHTTPTimeout {
		t.Fatalf("no timeout: bound %v, want %v", got, DefaultHTTPTimeout)
	}
	if got := httpTimeout(&JobConfig{Timeout: Duration(time.Minute)}); got != time.Minute {
		t.Fatalf("timeout 1m: bound %v, want 1m", got)
	}
}

// TestHTTPJobStalledBodyEnds: an endpoint that sends its status and then
// stalls its body is bounded the same way, and the run fails: the answer
// is incomplete.
func TestHTTPJobStalledBodyEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	j := &JobConfig{Name: "hook", HTTP: &HTTPJob{Method: "GET", URL: srv.URL}}
	done := make(chan error, 1)
	go func() {
		done <- httpFunc(j, srv.Client(), redact.NewScrubber(), 200*time.Millisecond)(context.Background(), run)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, schedule.ErrJobTimeout) || !strings.Contains(err.Error(), "body stalled") {
			t.Fatalf("err = %v, want a failure wrapping schedule.ErrTimeout that says the body stalled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an HTTP job whose body stalls was still running 20s after it started, with a 200ms bound")
	}
}
