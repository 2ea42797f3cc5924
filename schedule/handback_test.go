package schedule_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
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

// slowPauseRead answers the next read of a paused state, once armed,
// delay late: the request was sent, the reply is slow, and it does not
// notice that its caller's context ended meanwhile.
func slowPauseRead(b backend.Backend, delay time.Duration) (fb *faultbackend.Backend, armed *atomic.Bool) {
	armed = new(atomic.Bool)
	return &faultbackend.Backend{Next: b,
		OnHighWater: func(ctx context.Context, next faultbackend.HighWaterFunc, job string) (time.Time, string, error) {
			hw, st, err := next(ctx, job)
			if !strings.HasSuffix(job, "#version") && strings.HasPrefix(job, "tick") && armed.CompareAndSwap(true, false) {
				time.Sleep(delay)
			}
			return hw, st, err
		}}, armed
}

// TestCutOffClaimRecordsNothingAfterHandBack: the old registration's
// claim of T is cut off by Remove while it reads the paused state; T is
// handed back and the job registered again claims and runs it, on time.
// The old claim's read then returns, past the grace, and the old goroutine
// (its context ended) recorded T as a misfire: T ran AND misfired (hostile
// review). It must record nothing: T is the new registration's.
func TestCutOffClaimRecordsNothingAfterHandBack(t *testing.T) {
	for _, away := range []time.Duration{time.Second, 6 * time.Second} {
		t.Run(away.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				defer mem.Close()
				b, armed := slowPauseRead(mem, 8*time.Second)
				log := newLedgerLog()
				s, err := schedule.New(b, schedule.WithInstance("a"), schedule.WithObserver(schedule.ObserverFunc(log.observe)))
				if err != nil {
					t.Fatal(err)
				}
				job := schedule.Job{Name: "tick", Schedule: "@every 1m", Misfire: schedule.MisfireSkip,
					MisfireGrace: 5 * time.Second, Func: log.run}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now().Truncate(time.Minute)
				if err := s.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				defer s.Shutdown(context.Background())
				at := t0.Add(time.Minute).UTC()
				time.Sleep(at.Add(-time.Second).Sub(time.Now()))
				synctest.Wait()
				armed.Store(true)
				time.Sleep(time.Second)
				synctest.Wait() // the timer fired: the claim of at waits on the slow read
				if err := s.Remove("tick"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(away)
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Second)
				synctest.Wait()
				log.mu.Lock()
				defer log.mu.Unlock()
				if log.ran[at] > 0 && log.misfired[at] > 0 {
					t.Errorf("instant %v ran %d time(s) and was also recorded as %d misfire(s)", at, log.ran[at], log.misfired[at])
				}
				if log.ran[at]+log.misfired[at] != 1 {
					t.Errorf("instant %v: ran %d, misfire events %d; want exactly one of them", at, log.ran[at], log.misfired[at])
				}
			})
		})
	}
}

// slowClaimReply applies the next Claim, once armed, at once and delivers
// its reply delay later, whatever its caller's context does meanwhile.
func slowClaimReply(b backend.Backend, delay time.Duration) (fb *faultbackend.Backend, armed *atomic.Bool) {
	armed = new(atomic.Bool)
	return &faultbackend.Backend{Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			g, err := next(ctx, req)
			if armed.CompareAndSwap(true, false) {
				time.Sleep(delay)
			}
			return g, err
		}}, armed
}

// TestChangedScheduleWaitsForInFlightClaims: the claim of T is
// under way (applied, reply slow) when the job is replaced with another
// schedule. T is "dropped": dropHanded records it as a misfire, skipped.
// The reply then arrives within the grace and the old goroutine runs T.
// T was both reported skipped and run (hostile review); the report now
// waits for the old claim to end. Same with the job re-registered as
// EveryInstance (put moves handed to dropped).
func TestChangedScheduleWaitsForInFlightClaims(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again func(*schedule.Job)
	}{
		{"another schedule", func(j *schedule.Job) { j.Schedule = "@every 2m" }},
		{"every instance", func(j *schedule.Job) { j.Mode = schedule.EveryInstance }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				defer mem.Close()
				b, armed := slowClaimReply(mem, 3*time.Second)
				log := newLedgerLog()
				s, err := schedule.New(b, schedule.WithInstance("a"), schedule.WithObserver(schedule.ObserverFunc(log.observe)))
				if err != nil {
					t.Fatal(err)
				}
				job := schedule.Job{Name: "tick", Schedule: "@every 1m", Misfire: schedule.MisfireSkip,
					MisfireGrace: 5 * time.Second, Func: log.run}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now().Truncate(time.Minute)
				if err := s.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				defer s.Shutdown(context.Background())
				at := t0.Add(time.Minute).UTC()
				time.Sleep(at.Add(-time.Second).Sub(time.Now()))
				synctest.Wait()
				armed.Store(true)
				time.Sleep(time.Second)
				synctest.Wait() // the claim of at is applied; its reply is on the way
				tc.again(&job)
				if err := s.Replace(job); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Second)
				synctest.Wait()
				log.mu.Lock()
				defer log.mu.Unlock()
				if log.ran[at] > 0 && log.misfired[at] > 0 {
					t.Errorf("instant %v ran %d time(s) and was also recorded as %d misfire(s), skipped", at, log.ran[at], log.misfired[at])
				}
				if log.ran[at]+log.misfired[at] != 1 {
					t.Errorf("instant %v: ran %d, misfired %d; want exactly one of them", at, log.ran[at], log.misfired[at])
				}
			})
		})
	}
}

// TestHandedCatchUpFollowsNewPolicy: catch-up instants queued under
// run-all are handed back to the job replaced with the same schedule but
// policy skip (the reload that changed the job changed its policy). They
// are late by minutes, past the grace; under skip they are misfires. They
// went back to the catch-up queue and ran as catch-ups (hostile review).
func TestHandedCatchUpFollowsNewPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		t0 := time.Now().Truncate(time.Minute)
		log := newLedgerLog()
		release := make(chan struct{})
		var held atomic.Bool
		job := schedule.Job{Name: "tick", Schedule: "@every 1m", Misfire: schedule.MisfireRunAll,
			Func: func(ctx context.Context, r schedule.Run) error {
				if r.ScheduledAt.After(t0.Add(time.Minute)) && held.CompareAndSwap(false, true) {
					<-release // the first catch-up run holds the queue
				}
				return log.run(ctx, r)
			}}
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
		job.Misfire = schedule.MisfireSkip // same schedule, policy now skip
		if err := s.Replace(job); err != nil {
			t.Fatal(err)
		}
		close(release)
		time.Sleep(t0.Add(5*time.Minute + 59*time.Second).Sub(time.Now()))
		synctest.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		for i := 3; i <= 5; i++ {
			at := t0.Add(time.Duration(i) * time.Minute).UTC()
			if log.ran[at] != 0 {
				t.Errorf("instant %v, handed back minutes late to a job whose policy is skip, ran %d time(s) (misfired %d)", at, log.ran[at], log.misfired[at])
			}
		}
	})
}

// TestReRegisterKeepsInstantsWithinGrace: a job removed and registered
// again (the daemon does so while its instance id is lost: a pause past the
// instance TTL) continues from the last instant it handled, so an instant
// that came due meanwhile, still within the misfire grace, runs; issue #28
// item 6: its timer restarted at "now" and the instant was lost, with
// nothing in the log. In synctest's virtual time.
func TestReRegisterKeepsInstantsWithinGrace(t *testing.T) {
	for _, policy := range []schedule.Misfire{schedule.MisfireSkip, schedule.MisfireRunOnce} {
		t.Run(string(policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				defer b.Close()
				s, err := schedule.New(b, schedule.WithInstance("a"))
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				ran := map[time.Time]bool{}
				job := schedule.Job{Name: "tick", Schedule: "@every 30s", Misfire: policy, MisfireGrace: 5 * time.Second,
					Func: func(_ context.Context, r schedule.Run) error {
						mu.Lock()
						ran[r.ScheduledAt] = true
						mu.Unlock()
						return nil
					}}
				if err := s.Register(job); err != nil {
					t.Fatal(err)
				}
				t0 := time.Now().Truncate(30 * time.Second)
				if err := s.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				defer s.Shutdown(context.Background())
				time.Sleep(t0.Add(31 * time.Second).Sub(time.Now()))
				synctest.Wait()
				if err := s.Remove("tick"); err != nil { // the instance id is lost
					t.Fatal(err)
				}
				time.Sleep(t0.Add(62 * time.Second).Sub(time.Now())) // t0+60 falls due 2 s before it is held again
				if err := s.Replace(job); err != nil {
					t.Fatal(err)
				}
				time.Sleep(30 * time.Second)
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				for _, at := range []time.Time{t0.Add(30 * time.Second), t0.Add(60 * time.Second), t0.Add(90 * time.Second)} {
					if !ran[at.UTC()] {
						t.Errorf("instant %v did not run; ran %v", at.UTC(), ran)
					}
				}
			})
		})
	}
}
