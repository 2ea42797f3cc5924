package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestReadmeShutdownPattern: the README's pattern — Start(ctx) with a
// signal context, defer Shutdown(ctx) — lets a running job finish within the
// grace after the signal: the end of Start's context stops new claims but
// does not cancel a run, and Shutdown given that (already cancelled)
// context still waits the grace. Issue #28 item 4: the job was cancelled at
// the signal and Shutdown returned "jobs still running at shutdown".
func TestReadmeShutdownPattern(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, err := schedule.New(b, schedule.WithInstance("a"), schedule.WithGrace(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		started, jobErr := make(chan struct{}), make(chan error, 1)
		calls := 0
		err = s.Register(schedule.Job{Name: "slow", Schedule: "@every 1s", MaxConcurrent: 1,
			Func: func(ctx context.Context, r schedule.Run) error {
				calls++
				if calls > 1 {
					return nil
				}
				close(started)
				select {
				case <-time.After(3 * time.Second): // a 3 s job
					jobErr <- nil
					return nil
				case <-ctx.Done():
					jobErr <- context.Cause(ctx)
					return ctx.Err()
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		sig, stop := context.WithCancel(context.Background()) // signal.NotifyContext's stand-in
		shutdownErr := make(chan error, 1)
		go func() {
			_ = s.Start(sig)
			defer func() { shutdownErr <- s.Shutdown(sig) }()
			<-sig.Done()
		}()
		<-started
		stop() // SIGTERM
		if err := <-shutdownErr; err != nil {
			t.Fatalf("Shutdown = %v, want nil: the 3 s job fits in the 10 s grace", err)
		}
		if err := <-jobErr; err != nil {
			t.Fatalf("job was cancelled (%v) although it fit in the grace", err)
		}
		runs, err := b.ListRuns(context.Background(), backend.RunFilter{Job: "slow", State: backend.Succeeded})
		if err != nil || len(runs) == 0 {
			t.Fatalf("succeeded runs after shutdown: %v, %v", runs, err)
		}
		if calls != 1 {
			t.Errorf("the job ran %d times; after the signal nothing is claimed", calls)
		}
	})
}

// TestShutdownDeadlineCutsGrace: a Shutdown context that ends during the
// grace still cancels the jobs then (the caller's deadline is kept): only
// a context already done when Shutdown is called leaves the grace whole.
func TestShutdownDeadlineCutsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		s, err := schedule.New(b, schedule.WithInstance("a"), schedule.WithGrace(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		started, cause := make(chan struct{}), make(chan error, 1)
		once := false
		_ = s.Register(schedule.Job{Name: "slow", Schedule: "@every 1s", MaxConcurrent: 1,
			Func: func(ctx context.Context, r schedule.Run) error {
				if once {
					return nil
				}
				once = true
				close(started)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			}})
		_ = s.Start(context.Background())
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		t0 := time.Now()
		_ = s.Shutdown(ctx) // may say the job was still running at the deadline
		if d := time.Since(t0); d != 2*time.Second {
			t.Errorf("Shutdown took %v, want the context's 2s (not the 1m grace)", d)
		}
		if c := <-cause; !errors.Is(c, schedule.ErrSchedulerShutdown) {
			t.Errorf("job's cause = %v, want ErrShutdown", c)
		}
	})
}

// TestShutdownGraceThenCancel runs in a synctest bubble: the 100 ms grace
// the running job is given before it is cancelled is virtual time.
func TestShutdownGraceThenCancel(t *testing.T) {
	synctest.Test(t, shutdownGraceThenCancel)
}

// shutdownGraceThenCancel is TestShutdownGraceThenCancel
// inside its bubble.
func shutdownGraceThenCancel(t *testing.T) {
	b := memory.New()
	started := make(chan struct{}, 1)
	var cause error
	s := newScheduler(t, b, "a", schedule.WithGrace(100*time.Millisecond))
	_ = s.Register(schedule.Job{Name: "slow", Schedule: "@every 50ms", Misfire: schedule.MisfireSkip,
		Func: func(ctx context.Context, r schedule.Run) error {
			select {
			case started <- struct{}{}:
			default:
				return nil
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}})
	start(t, s)
	<-started
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, schedule.ErrSchedulerShutdown) {
		t.Fatalf("job's cause = %v, want ErrShutdown", cause)
	}
	runs, _ := b.ListRuns(context.Background(), backend.RunFilter{Job: "slow", State: backend.Failed})
	if len(runs) != 1 || !strings.Contains(runs[0].Error, "shut down") {
		t.Fatalf("failed runs after shutdown: %+v", runs)
	}
}
