package schedule_test

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
	"github.com/leasehold/leasehold/schedule"
)

// gatedVersions holds the schedule-version reads of jobs named slow-*
// until release is called, as a backend that stalls (or a lock held on it)
// holds a job's start-up; blocked counts the reads held.
func gatedVersions(b backend.Backend) (fb *faultbackend.Backend, release func(), blocked *atomic.Int32) {
	gate := make(chan struct{})
	blocked = new(atomic.Int32)
	fb = &faultbackend.Backend{Next: b,
		OnListRuns: func(ctx context.Context, next faultbackend.ListRunsFunc, f backend.RunFilter) ([]backend.Run, error) {
			if strings.Contains(f.Job, "slow-") {
				blocked.Add(1)
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return next(ctx, f)
		}}
	return fb, sync.OnceFunc(func() { close(gate) }), blocked
}

// slowStartUps starts a scheduler over a backend that holds the start-up
// of n slow-* jobs (more than the scheduler does at once), and returns it
// once they hold every start-up slot, with the call that lets them go on.
func slowStartUps(t *testing.T, n int, opts ...schedule.Option) (s *schedule.Scheduler, release func()) {
	t.Helper()
	b, release, blocked := gatedVersions(memory.New())
	s, err := schedule.New(b, append([]schedule.Option{schedule.WithInstance("i1")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.Register(schedule.Job{Name: fmt.Sprintf("slow-%d", i), Schedule: "@yearly",
			Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	eventually.True(t, 10*time.Second, "the slow jobs' start-ups hold the slots", func() bool { return blocked.Load() >= 8 })
	return s, release
}

// TestEveryInstanceJobWaitsForNoStartUpSlot: the scheduler does at most 8
// jobs' start-up backend work at once; an every-instance job has none (no
// version, no catch-up), so jobs whose start-up is stuck on the backend
// must not keep it from running — it needs no backend at all.
//
// It runs in a synctest bubble: its 100 ms instants and the 10 s it
// waits for one to run are virtual time.
func TestEveryInstanceJobWaitsForNoStartUpSlot(t *testing.T) {
	synctest.Test(t, everyInstanceJobWaitsForNoStartUpSlot)
}

// everyInstanceJobWaitsForNoStartUpSlot is TestEveryInstanceJobWaitsForNoStartUpSlot
// inside its bubble.
func everyInstanceJobWaitsForNoStartUpSlot(t *testing.T) {
	s, _ := slowStartUps(t, 12)
	ran := make(chan struct{}, 1)
	if err := s.Register(schedule.Job{Name: "local", Schedule: "@every 100ms", Mode: schedule.EveryInstance,
		Func: func(context.Context, schedule.Run) error {
			select {
			case ran <- struct{}{}:
			default:
			}
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the every-instance job did not run in 10 s: it waits behind start-ups stuck on the backend")
	}
}

// TestStartUpSlotWaitIsNoSilentGap: a job whose start-up waited for a slot
// (other jobs' start-ups held them) counts its instants from when it was
// registered, as it did when every job started at once: those that came
// due meanwhile, later than the misfire grace, are misfires the policy
// applies and reports — not a gap nobody hears of.
//
// It runs in a synctest bubble: the half second of instants that come due
// while its start-up waits (beyond the 100 ms grace) is virtual time.
func TestStartUpSlotWaitIsNoSilentGap(t *testing.T) {
	synctest.Test(t, startUpSlotWaitIsNoSilentGap)
}

// startUpSlotWaitIsNoSilentGap is TestStartUpSlotWaitIsNoSilentGap
// inside its bubble.
func startUpSlotWaitIsNoSilentGap(t *testing.T) {
	var misfired atomic.Int32
	obs := schedule.ObserverFunc(func(ev schedule.Event) {
		if ev.Kind == schedule.EventMisfire && ev.Job == "late" {
			misfired.Add(int32(ev.Count))
		}
	})
	s, release := slowStartUps(t, 12, schedule.WithObserver(obs))
	registered := time.Now()
	if err := s.Register(schedule.Job{Name: "late", Schedule: "@every 100ms", MisfireGrace: 100 * time.Millisecond,
		Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	// Instants of "late" come due while its start-up waits.
	eventually.True(t, 10*time.Second, "half a second of instants passed", func() bool { return time.Since(registered) > 500*time.Millisecond })
	release()
	eventually.True(t, 10*time.Second, `"late"'s instants of its start-up wait reported as misfires`, func() bool { return misfired.Load() > 0 })
}

// TestEveryInstantOnceInVirtualTime: three schedulers on one memory
// backend run an @every 1s job for 20 seconds of synctest's virtual clock
// (no real waiting, and no timing left to chance): every instant between
// the first and the last ran exactly once.
func TestEveryInstantOnceInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var mu sync.Mutex
		ran := map[time.Time][]string{}
		var scheds []*schedule.Scheduler
		for _, name := range []string{"a", "b", "c"} {
			s, err := schedule.New(b, schedule.WithInstance(name), schedule.WithSweepEvery(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Register(schedule.Job{Name: "tick", Schedule: "@every 1s", Func: func(_ context.Context, r schedule.Run) error {
				mu.Lock()
				ran[r.ScheduledAt] = append(ran[r.ScheduledAt], name)
				mu.Unlock()
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
		time.Sleep(20 * time.Second) // virtual: returns once every goroutine waits on the clock
		for _, s := range scheds {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			cancel()
		}
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		var first, last time.Time
		for at, on := range ran {
			if len(on) != 1 {
				t.Errorf("%v ran on %v", at, on)
			}
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		if len(ran) < 19 {
			t.Fatalf("%d instants ran in 20 virtual seconds; want at least 19", len(ran))
		}
		for at := first; !at.After(last); at = at.Add(time.Second) {
			if _, ok := ran[at]; !ok {
				t.Errorf("instant %v between the first and the last did not run", at)
			}
		}
	})
}

// TestJitterBeyondMisfireWindowStillRuns (found by review; the bug it shows): Jitter "delays the run,
// never the key" and "Jitter is not counted as lateness". But occur()
// sends MaxLate = MisfireWindow + tolerance after the jitter delay, so any
// jitter drawn above that is refused by the ledger as ErrTooLate and the
// occurrence never runs. Validation accepts Jitter > MisfireWindow.
//
// It runs in a synctest bubble and asserts once ten occurrences were
// judged (run or refused), rather than after a fixed 5 s.
func TestJitterBeyondMisfireWindowStillRuns(t *testing.T) {
	synctest.Test(t, jitterBeyondMisfireWindowStillRuns)
}

// jitterBeyondMisfireWindowStillRuns is TestJitterBeyondMisfireWindowStillRuns
// inside its bubble.
func jitterBeyondMisfireWindowStillRuns(t *testing.T) {
	var tooLate atomic.Int64
	var ran atomic.Int64
	s := newScheduler(t, memory.New(), "a", schedule.WithObserver(schedule.ObserverFunc(func(ev schedule.Event) {
		if ev.Kind == schedule.EventMisfire && errors.Is(ev.Err, backend.ErrOccurrenceTooLate) {
			tooLate.Add(1)
		}
	})))
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 500ms", Jitter: 2 * time.Second, MisfireWindow: 300 * time.Millisecond,
		Func: func(ctx context.Context, r schedule.Run) error { ran.Add(1); return nil }})
	if err != nil {
		t.Fatalf("Register: %v (a validation error would also be a fix)", err)
	}
	start(t, s)
	eventually.True(t, 20*time.Second, "ten occurrences run or refused", func() bool { return ran.Load()+tooLate.Load() >= 10 })
	if n := tooLate.Load(); n > 0 {
		t.Errorf("%d jittered occurrences refused by the ledger as too late (%d ran): jitter is counted as lateness by MaxLate", n, ran.Load())
	}
}
