package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// slowMarkerFinish holds the Finish of a trigger key's marker until
// release is closed, as a loaded SQLite holds a write behind others.
func slowMarkerFinish(b backend.Backend, release <-chan struct{}) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			if strings.Contains(req.Job, triggerInfix) {
				<-release
			}
			return next(ctx, req)
		},
	}
}

// TestTriggeredRunStartsBeforeTheMarkerIsRecorded: TriggerRun recorded the
// trigger key's outcome before it started the run, and the run's
// heartbeats start with the run: in a chaos run on a loaded SQLite that
// write took 7.6 s, the won claim's lease lapsed unrenewed, another
// instance reclaimed the occurrence, and then the job was started on the
// dead lease beside it. The run (and its heartbeats) must not wait for the
// marker.
//
// It runs in a synctest bubble: the 1 s lease that would lapse while the
// marker's write is held is virtual time.
func TestTriggeredRunStartsBeforeTheMarkerIsRecorded(t *testing.T) {
	synctest.Test(t, triggeredRunStartsBeforeTheMarkerIsRecorded)
}

// triggeredRunStartsBeforeTheMarkerIsRecorded is TestTriggeredRunStartsBeforeTheMarkerIsRecorded
// inside its bubble.
func triggeredRunStartsBeforeTheMarkerIsRecorded(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	release := make(chan struct{})
	b := slowMarkerFinish(mem, release)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	s, err := New(b, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan Run, 1)
	err = s.Register(Job{Name: "manual", Schedule: "0 0 1 1 *", LeaseTTL: time.Second,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	triggered := make(chan error, 1)
	go func() { triggered <- s.Trigger(ctx, "manual", "k1") }()
	select {
	case r := <-ran:
		if r.Attempt != 1 {
			t.Fatalf("the triggered run started as attempt %d: its claim's lease lapsed while the trigger key's record was written, and it was recovered", r.Attempt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the triggered run did not start while its trigger key's record was being written")
	}
	close(release)
	if err := <-triggered; err != nil {
		t.Fatalf("Trigger: %v", err)
	}
}

// frozenClock reads one instant; its timers run in real time.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time                         { return c.t }
func (c frozenClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestTriggerBurstInOneMillisecond: triggers that read the same
// millisecond move on by 1 ms per collision, at most 10 times; past that
// the trigger is refused with ErrOverlap, a documented refusal that frees
// its key (it runs when retried).
func TestTriggerBurstInOneMillisecond(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	s, err := New(b, WithInstance("a"), WithClock(frozenClock{time.Now()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(Job{Name: "j", Schedule: "0 0 1 1 *", Func: func(context.Context, Run) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	for i := range 12 {
		if _, err := s.TriggerRun(context.Background(), "j", "key-"+string(rune('a'+i))); err != nil && (i < 10 || !errors.Is(err, backend.ErrOccurrenceOverlap)) {
			t.Fatalf("trigger %d of an unlimited job, with its own key, in one millisecond: %v", i+1, err)
		}
	}
}

// TestTriggerAfterShutdownRefused (found by review; the bug it shows): Shutdown "stops claiming" and waits for
// the runs; TriggerRun checks only that the scheduler was started, so a
// trigger that arrives during or after Shutdown (an admin request racing
// the daemon's stop) claims and starts a run that Shutdown no longer waits
// for — the process exits under it, and the occurrence is left to the
// crash policy. (s.runs.Add after s.runs.Wait returned is also a misuse
// of sync.WaitGroup.)
func TestTriggerAfterShutdownRefused(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	ran := make(chan Run, 1)
	s := startJob(t, b, "a", Job{Name: "j", Schedule: "0 0 1 1 *",
		Func: func(_ context.Context, r Run) error { ran <- r; return nil }})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := s.TriggerRun(context.Background(), "j", "late")
	if err == nil {
		select {
		case <-ran:
			t.Fatalf("a trigger after Shutdown returned claimed and ran the job (at %s token %d)", r.ScheduledAt.Format(time.RFC3339Nano), r.Token)
		case <-time.After(time.Second):
			t.Fatalf("a trigger after Shutdown returned was accepted (at %s token %d)", r.ScheduledAt.Format(time.RFC3339Nano), r.Token)
		}
	}
}

// slowTriggerClaim delays the claims of triggered runs (not of the key
// markers): a loaded backend.
func slowTriggerClaim(b backend.Backend, delay time.Duration) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if strings.HasPrefix(req.SpecVersion, TriggerVersionPrefix) {
				time.Sleep(delay)
			}
			return next(ctx, req)
		},
	}
}

// TestRefusedTriggerKeepsKeyOnSlowClaim (found by review; the bug it shows): "one at its MaxConcurrent
// (ErrOverlap) refuses the trigger, runs nothing, and leaves the key free
// to retry" (README). The key's marker is claimed with the job's LeaseTTL
// and never heartbeated, so when the run's claim takes longer than the
// TTL the refusal cannot be recorded (the marker's lease is gone) and the
// key is burned: the retry with it is refused as "used before", though
// nothing ever ran under it.
//
// It runs in a synctest bubble: the run's claim taking 250 ms, longer than
// the marker's 150 ms lease, is virtual time, exact.
func TestRefusedTriggerKeepsKeyOnSlowClaim(t *testing.T) {
	synctest.Test(t, refusedTriggerKeepsKeyOnSlowClaim)
}

// refusedTriggerKeepsKeyOnSlowClaim is TestRefusedTriggerKeepsKeyOnSlowClaim
// inside its bubble.
func refusedTriggerKeepsKeyOnSlowClaim(t *testing.T) {
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	b := slowTriggerClaim(m, 250*time.Millisecond)
	release := make(chan struct{})
	var once sync.Once
	s := startJob(t, b, "a", Job{Name: "j", Schedule: "0 0 1 1 *", LeaseTTL: 150 * time.Millisecond, MaxConcurrent: 1,
		Func: func(ctx context.Context, r Run) error {
			<-release
			return nil
		}})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	first, err := s.TriggerRun(context.Background(), "j", "first")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TriggerRun(context.Background(), "j", "second")
	if !errors.Is(err, backend.ErrOccurrenceOverlap) {
		t.Fatalf("trigger at the limit: %v, want ErrOverlap", err)
	}
	once.Do(func() { close(release) })
	eventually.True(t, 10*time.Second, "the first run finished", func() bool {
		r, err := m.GetRun(context.Background(), LedgerJob(s.cfg.namespace, "j"), first.ScheduledAt)
		return err == nil && r.State == backend.Succeeded
	})
	if _, err := s.TriggerRun(context.Background(), "j", "second"); err != nil {
		t.Fatalf("retrying a key whose trigger was refused at the limit (nothing ran under it): %v", err)
	}
}

// TestTriggerWithAnUnansweringKeyWriteReturns: the trigger key's use is
// written under the caller's context: a backend that never answers that
// write must not hold TriggerRun for ever; it returns when its context
// ends, and nothing ran.
//
// It runs in a synctest bubble: the trigger's 1 s context and the 30 s
// allowed are virtual time.
func TestTriggerWithAnUnansweringKeyWriteReturns(t *testing.T) {
	synctest.Test(t, triggerWithAnUnansweringKeyWriteReturns)
}

// triggerWithAnUnansweringKeyWriteReturns is TestTriggerWithAnUnansweringKeyWriteReturns
// inside its bubble.
func triggerWithAnUnansweringKeyWriteReturns(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	var stalled atomic.Bool
	b := &faultbackend.Backend{Next: mem,
		OnCreateRecord: func(ctx context.Context, next faultbackend.CreateRecordFunc, req backend.CreateRecordRequest) (backend.Record, bool, error) {
			if strings.Contains(req.Name, triggerInfix) {
				stalled.Store(true)
				<-ctx.Done() // the backend never answers the key's use
				return backend.Record{}, false, fmt.Errorf("no answer: %w", ctx.Err())
			}
			return next(ctx, req)
		}}
	s, err := New(b, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Register(Job{Name: "manual", Schedule: "0 0 1 1 *", Func: func(context.Context, Run) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	tctx, tcancel := context.WithTimeout(ctx, time.Second)
	defer tcancel()
	triggered := make(chan error, 1)
	go func() { triggered <- s.Trigger(tctx, "manual", "k1") }()
	select {
	case err := <-triggered:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Trigger whose key's use was never answered: %v, want its context's end", err)
		}
		if !stalled.Load() {
			t.Fatal("the key's use was never written")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Trigger still blocked 30 s after its call (its context ended after 1 s)")
	}
}

// refusalWrites delays, by slow, the write that records a trigger key's
// refusal (its record at an odd seq), as a loaded SQLite delays a write
// behind others; never answers it when slow is 0. started is signalled
// (without blocking) when such a write begins.
func refusalWrites(b backend.Backend, slow time.Duration, started chan<- struct{}) *faultbackend.Backend {
	return &faultbackend.Backend{Next: b,
		OnCreateRecord: func(ctx context.Context, next faultbackend.CreateRecordFunc, req backend.CreateRecordRequest) (backend.Record, bool, error) {
			if strings.Contains(req.Name, triggerInfix) && req.Seq%2 == 1 {
				select {
				case started <- struct{}{}:
				default:
				}
				var late <-chan time.Time
				if slow > 0 {
					late = time.After(slow)
				}
				select {
				case <-late:
				case <-ctx.Done():
					return backend.Record{}, false, fmt.Errorf("no answer: %w", ctx.Err())
				}
			}
			return next(ctx, req)
		}}
}

// TestRefusedTriggerWithASlowRecordFreesTheKey: a refused trigger frees its
// key once the refusal is recorded. That write, 4 s late, must still be
// waited for (a 3 s bound left the key used for good: a retry was told
// "the key was used before", though nothing ran). A write that cannot be
// made is waited for no longer than 3 s after the caller's context ends,
// whether by its deadline or by a cancel, and the caller is told the key
// is spent (ErrTriggerKeySpent, not ErrOverlap, which says the key is free).
// Each case runs in a synctest bubble: the 4 s write, the deadlines and the
// 3 s grace are virtual time.
func TestRefusedTriggerWithASlowRecordFreesTheKey(t *testing.T) {
	for _, c := range []struct {
		name     string
		slow     time.Duration
		deadline time.Duration // of the refused call; 0: cancelled once its write began
		freed    bool
	}{
		{"written 4 s late", 4 * time.Second, 15 * time.Second, true},
		{"never written, caller's deadline", 0, 4 * time.Second, false},
		{"never written, caller cancels", 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				t.Cleanup(func() { mem.Close() })
				release := make(chan struct{})
				var once sync.Once
				writing := make(chan struct{}, 1)
				s := startJob(t, refusalWrites(mem, c.slow, writing), "a", Job{Name: "j", Schedule: "0 0 1 1 *", MaxConcurrent: 1,
					Func: func(ctx context.Context, r Run) error { <-release; return nil }})
				t.Cleanup(func() { once.Do(func() { close(release) }) })
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := s.TriggerRun(ctx, "j", "first"); err != nil {
					t.Fatal(err)
				}
				var (
					rctx    context.Context
					rcancel context.CancelFunc
				)
				if c.deadline > 0 {
					rctx, rcancel = context.WithTimeout(ctx, c.deadline)
				} else {
					rctx, rcancel = context.WithCancel(ctx)
					go func() {
						select {
						case <-writing:
							rcancel()
						case <-rctx.Done():
						}
					}()
				}
				refused := make(chan error, 1)
				go func() { _, err := s.TriggerRun(rctx, "j", "second"); refused <- err }()
				var err error
				select {
				case err = <-refused:
				case <-time.After(30 * time.Second):
					t.Fatalf("the refused trigger still blocked 30 s after its call (deadline %v; its context ended, and the refusal's write is waited for %v more at most)", c.deadline, recordFinishWait)
				}
				rcancel()
				switch {
				case c.freed && !errors.Is(err, backend.ErrOccurrenceOverlap):
					t.Fatalf("second trigger beside a running first under MaxConcurrent 1: %v, want ErrOverlap", err)
				case !c.freed && (!errors.Is(err, ErrTriggerKeySpent) || errors.Is(err, backend.ErrOccurrenceOverlap)):
					t.Fatalf("refused trigger whose refusal was never recorded: %v, want ErrTriggerKeySpent (and not ErrOverlap, which says the key is free)", err)
				}
				once.Do(func() { close(release) })
				var rerr error
				eventually.True(t, 10*time.Second, "the first run finishes", func() bool {
					_, rerr = s.TriggerRun(ctx, "j", "second")
					return !errors.Is(rerr, backend.ErrOccurrenceOverlap)
				})
				switch {
				case c.freed && rerr != nil:
					t.Fatalf("retry of the refused key after the first run ended: %v, want it run (the refusal was recorded)", rerr)
				case !c.freed && !errors.Is(rerr, backend.ErrOccurrenceClaimed):
					t.Fatalf("retry of a key whose refusal was never recorded: %v, want ErrClaimed (the key counts as used, as the caller was told)", rerr)
				}
			})
		})
	}
}
