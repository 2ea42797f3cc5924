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

// ledgerLog records, per instant, the runs of a job and the claims won and
// misfires its scheduler reported.
type ledgerLog struct {
	mu       sync.Mutex
	ran      map[time.Time]int
	won      map[time.Time]int
	misfired map[time.Time]int
}

func newLedgerLog() *ledgerLog {
	return &ledgerLog{ran: map[time.Time]int{}, won: map[time.Time]int{}, misfired: map[time.Time]int{}}
}

func (l *ledgerLog) observe(ev schedule.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case ev.Kind == schedule.EventClaim && ev.Result == schedule.ClaimWon:
		l.won[ev.ScheduledAt]++
	case ev.Kind == schedule.EventMisfire:
		l.misfired[ev.ScheduledAt]++
	}
}

func (l *ledgerLog) run(_ context.Context, r schedule.Run) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ran[r.ScheduledAt]++
	return nil
}

// TestReRegisterHandsBackJitterWait: an instant whose claim waits on its
// jitter delay when the job is removed is handed back to the job
// registered again with the same schedule — hostile review, finding (b):
// the timer continued from the last instant it had dispatched, and that
// instant was claimed by nobody, with no misfire recorded. Back before the
// instant's jittered start plus the grace, it runs, once; back later, the
// misfire policy applies: skip records a misfire, run-once catches it up.
// In synctest's virtual time.
func TestReRegisterHandsBackJitterWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy schedule.Misfire
		away   time.Duration // from the instant's timer firing to registering again
		again  string        // the schedule registered again ("": the same)
		runs   bool
	}{
		{"skip back in time", schedule.MisfireSkip, time.Second, "", true},
		// Later than any jitter delay (< 40 s) plus the grace (5 s).
		{"skip back late", schedule.MisfireSkip, 46 * time.Second, "", false},
		{"run-once back late", schedule.MisfireRunOnce, 46 * time.Second, "", true},
		// Another schedule does not claim the old one's instants: skipped,
		// and recorded so.
		{"another schedule", schedule.MisfireRunOnce, time.Second, "@every 2m", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				log := newLedgerLog()
				s, err := schedule.New(b, schedule.WithInstance("a"), schedule.WithObserver(schedule.ObserverFunc(log.observe)))
				if err != nil {
					t.Fatal(err)
				}
				job := schedule.Job{Name: "tick", Schedule: "@every 1m", Jitter: 40 * time.Second,
					Misfire: tc.policy, MisfireGrace: 5 * time.Second, Func: log.run}
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
				synctest.Wait() // the timer fired: the claim of at waits on its jitter
				if err := s.Remove("tick"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tc.away)
				if tc.again != "" {
					job.Schedule = tc.again
				}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				// Past any jitter delay a catch-up claim draws anew.
				time.Sleep(tc.away + job.Jitter)
				synctest.Wait()
				log.mu.Lock()
				defer log.mu.Unlock()
				want := 0
				if tc.runs {
					want = 1
				}
				if log.ran[at] != want || log.won[at] != want {
					t.Errorf("instant %v: ran %d times, claim won %d times; want %d (ran %v)", at, log.ran[at], log.won[at], want, log.ran)
				}
				if !tc.runs && log.misfired[at] != 1 {
					t.Errorf("instant %v neither ran nor was recorded as a misfire (misfires %v)", at, log.misfired)
				}
			})
		})
	}
}

// TestReRegisterHandsBackCatchUpQueue: catch-up instants queued behind a
// running catch-up occurrence when the job is removed are handed back to
// the job registered again with the same schedule, and each is claimed
// once — hostile review, finding (b): the queue was dropped and its
// instants were claimed by nobody. In synctest's virtual time.
func TestReRegisterHandsBackCatchUpQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		t0 := time.Now().Truncate(time.Minute)
		log := newLedgerLog()
		release := make(chan struct{})
		var first sync.Once
		job := schedule.Job{Name: "tick", Schedule: "@every 1m", Misfire: schedule.MisfireRunAll,
			Func: func(ctx context.Context, r schedule.Run) error {
				if r.ScheduledAt.After(t0.Add(time.Minute)) {
					first.Do(func() { <-release }) // the first catch-up run holds the queue
				}
				return log.run(ctx, r)
			}}

		// Instance a runs t0+1m, then stops: t0+2m..t0+5m pass unclaimed.
		a, err := schedule.New(b, schedule.WithInstance("a"))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Register(job); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(t0.Add(90 * time.Second).Sub(time.Now()))
		synctest.Wait()
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(t0.Add(5*time.Minute + 30*time.Second).Sub(time.Now()))

		// Instance b catches them up, one after another: the first runs
		// (held), the other three wait in the queue when the job is removed.
		s, err := schedule.New(b, schedule.WithInstance("b"), schedule.WithObserver(schedule.ObserverFunc(log.observe)))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(job); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		<-s.StartedUp()
		synctest.Wait()
		if err := s.Remove("tick"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := s.Register(job); err != nil {
			t.Fatal(err)
		}
		close(release)
		time.Sleep(t0.Add(5*time.Minute + 59*time.Second).Sub(time.Now())) // before the next instant
		synctest.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		for i := 1; i <= 5; i++ {
			at := t0.Add(time.Duration(i) * time.Minute).UTC()
			if log.ran[at] != 1 {
				t.Errorf("instant %v ran %d times, want 1 (ran %v)", at, log.ran[at], log.ran)
			}
		}
	})
}
