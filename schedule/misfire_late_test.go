package schedule_test

import (
	"context"
	"sort"
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

// Late instants, catch-up and the misfire grace: each test here began as a
// review finding against the late wake-up misfire change and failed on the
// commits it was found on.

// concurrency tracks how many job functions run at once.
type concurrency struct {
	cur, peak atomic.Int64
}

func (c *concurrency) enter() {
	n := c.cur.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}
func (c *concurrency) leave() { c.cur.Add(-1) }

// TestPauseShorterThanGraceLosesNothing: a pause shorter than the grace
// makes several instants of a job whose period is shorter than the grace
// come due at once; each is within the grace, so none is a misfire and
// every one runs (Job.MisfireGrace documents that they start together).
//
// It runs in a synctest bubble: the 700 ms stall (< grace) is the scenario,
// and in real time a starved process stretched it past the grace.
func TestPauseShorterThanGraceLosesNothing(t *testing.T) {
	synctest.Test(t, pauseShorterThanGraceLosesNothing)
}

// pauseShorterThanGraceLosesNothing is TestPauseShorterThanGraceLosesNothing
// inside its bubble.
func pauseShorterThanGraceLosesNothing(t *testing.T) {
	const period, grace = 100 * time.Millisecond, time.Second
	clock := newStallClock(t)
	s := newScheduler(t, memory.New(), "a", schedule.WithClock(clock))
	var log startLog
	var conc concurrency
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 100ms", MisfireGrace: grace,
		Func: func(ctx context.Context, r schedule.Run) error {
			conc.enter()
			defer conc.leave()
			from := time.Now()
			time.Sleep(40 * time.Millisecond) // shorter than the period: never overlaps on its own
			log.add(started{at: r.ScheduledAt, from: from, to: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 5*time.Second, "runs before the pause", func() bool { return len(log.all()) >= 3 })
	untilPhase(period, 50*time.Millisecond)
	stalledAt := time.Now()
	clock.Stall()
	time.Sleep(700 * time.Millisecond) // < grace
	resumed := time.Now()
	clock.Resume()
	eventually.True(t, 5*time.Second, "runs after the resume", func() bool {
		for _, r := range log.all() {
			if r.at.After(resumed.Add(period)) {
				return true
			}
		}
		return false
	})
	var burst []time.Time
	for _, r := range log.dueBetween(stalledAt, resumed) {
		burst = append(burst, r.at)
	}
	if want := int(resumed.Sub(stalledAt) / period); len(burst) < want-1 {
		t.Errorf("%d of the instants that came due during a %v pause ran, want at least %d: %v",
			len(burst), resumed.Sub(stalledAt).Round(time.Millisecond), want-1, burst)
	}
}

// TestRunAllCatchUpKeepsOrderAcrossLoop: misfire() says run-all runs
// the late instants one after another "followed by the on-time ones, so
// that runs keep their order". But the loop continues at once: the
// instants that come due while the catch-up goroutine still works through
// the late ones are started by later loop iterations beside it, so a newer
// instant starts before older caught-up ones and overlaps them (a 600 ms
// job due every second never overlaps itself otherwise).
//
// It runs in a synctest bubble, and asserts once two instants due after
// the resume have run (so every catch-up run before them has too).
func TestRunAllCatchUpKeepsOrderAcrossLoop(t *testing.T) {
	synctest.Test(t, runAllCatchUpKeepsOrderAcrossLoop)
}

// runAllCatchUpKeepsOrderAcrossLoop is TestRunAllCatchUpKeepsOrderAcrossLoop
// inside its bubble.
func runAllCatchUpKeepsOrderAcrossLoop(t *testing.T) {
	const period, grace = time.Second, 200 * time.Millisecond
	clock := newStallClock(t)
	s := newScheduler(t, memory.New(), "a", schedule.WithClock(clock))
	var log startLog
	var conc concurrency
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 1s", Misfire: schedule.MisfireRunAll, MisfireGrace: grace, MaxCatchUp: 5,
		Func: func(ctx context.Context, r schedule.Run) error {
			conc.enter()
			defer conc.leave()
			from := time.Now()
			time.Sleep(600 * time.Millisecond)
			log.add(started{at: r.ScheduledAt, from: from, to: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	untilPhase(period, 700*time.Millisecond) // the previous run has ended
	clock.Stall()
	time.Sleep(4 * period)
	untilPhase(period, 500*time.Millisecond)
	resumed := time.Now()
	clock.Resume()
	eventually.True(t, 10*period, "two instants due after the resume ran", func() bool { return log.dueAfter(resumed) >= 2 })
	var after []started
	for _, r := range log.all() {
		if !r.from.Before(resumed) { // virtual time: the first may start at resumed
			after = append(after, r)
		}
	}
	sort.Slice(after, func(i, j int) bool { return after[i].from.Before(after[j].from) })
	for i := 1; i < len(after); i++ {
		if after[i].at.Before(after[i-1].at) {
			t.Errorf("run of %v started after a run of the later %v (run-all catch-up out of order)",
				after[i].at.Format("15:04:05.000"), after[i-1].at.Format("15:04:05.000"))
		}
	}
	if p := conc.peak.Load(); p > 1 {
		t.Errorf("%d runs at once after a pause under run-all (catch-up runs are sequential; the job never overlaps otherwise)", p)
	}
}

// slowHighWater delays HighWater of one job, as a slow backend at start-up.
func slowHighWater(b backend.Backend, slowJob string, hold time.Duration) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnHighWater: func(ctx context.Context, next faultbackend.HighWaterFunc, job string) (time.Time, string, error) {
			if job == slowJob {
				time.Sleep(hold)
			}
			return next(ctx, job)
		},
	}
}

// TestStartupCatchUpAndLoopMisfireShareTheBound (found by review; the bug it shows): catchUp() at start-up
// covers instants up to the cursor taken before it read the high-water
// mark; if that read (or ensureVersion) is slow, the loop's first wake-up
// finds the instants since then late and misfire() starts a second
// catch-up goroutine beside the first: under run-all, up to 2×MaxCatchUp
// late runs, two at once.
//
// It runs in a synctest bubble: the 6 s nobody is alive are virtual, and
// it asserts once two instants due after the slow read returned ran.
func TestStartupCatchUpAndLoopMisfireShareTheBound(t *testing.T) {
	synctest.Test(t, startupCatchUpAndLoopMisfireShareTheBound)
}

// startupCatchUpAndLoopMisfireShareTheBound is
// TestStartupCatchUpAndLoopMisfireShareTheBound inside its bubble.
func startupCatchUpAndLoopMisfireShareTheBound(t *testing.T) {
	mem := memory.New()
	job := func(log *startLog, conc *concurrency) schedule.Job {
		return schedule.Job{Name: "tick", Schedule: "@every 1s", Misfire: schedule.MisfireRunAll, MisfireGrace: 200 * time.Millisecond, MaxCatchUp: 2,
			Func: func(ctx context.Context, r schedule.Run) error {
				conc.enter()
				defer conc.leave()
				from := time.Now()
				time.Sleep(300 * time.Millisecond)
				log.add(started{at: r.ScheduledAt, from: from, to: time.Now()})
				return nil
			}}
	}
	// A first instance runs the job for a while, so the high-water mark is set.
	var log1 startLog
	var c1 concurrency
	s1 := newScheduler(t, mem, "a")
	if err := s1.Register(job(&log1, &c1)); err != nil {
		t.Fatal(err)
	}
	if err := s1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "first instance runs", func() bool { return len(log1.all()) >= 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s1.Shutdown(ctx)
	cancel()
	down := time.Now()
	time.Sleep(6 * time.Second) // nobody alive: 6 instants missed
	var log2 startLog
	var c2 concurrency
	up := time.Now()
	s2 := newScheduler(t, slowHighWater(mem, "tick", 3*time.Second), "b")
	if err := s2.Register(job(&log2, &c2)); err != nil {
		t.Fatal(err)
	}
	start(t, s2)
	eventually.True(t, 20*time.Second, "two instants due after the slow read returned ran", func() bool { return log2.dueAfter(up.Add(3*time.Second)) >= 2 })
	// A catch-up run still going now is logged when it finishes: give any
	// such run (each takes 300 ms) virtual time to end before counting.
	time.Sleep(time.Second)
	synctest.Wait()
	var late []time.Time
	for _, r := range log2.all() {
		if r.at.After(down) && r.at.Before(up.Add(3*time.Second)) { // due before the slow read returned: caught up
			late = append(late, r.at)
		}
	}
	for _, r := range log2.all() {
		t.Logf("ran %s from %s (instance up %s, down %s)", r.at.Format("15:04:05.000"), r.from.Format("15:04:05.000"), up.Format("15:04:05.000"), down.Format("15:04:05.000"))
	}
	if len(late) > 2 {
		t.Errorf("%d missed instants caught up at start-up under run-all with MaxCatchUp 2: %v", len(late), late)
	}
	if p := c2.peak.Load(); p > 1 {
		t.Errorf("%d catch-up runs at once (catch-up is one after another)", p)
	}
}

// TestEveryInstanceLateWakeUpIsReported (found by review; the bug it shows): for an every-instance job the
// loop skips misfire() altogether and runs only the on-time instants: a
// late wake-up drops the late ones whatever the policy (run-once here),
// with no log line at Warn and no EventMisfire — misfires_total stays 0.
//
// It runs in a synctest bubble: the stall across two instants, and the
// lateness past the grace it makes, are virtual time.
func TestEveryInstanceLateWakeUpIsReported(t *testing.T) {
	synctest.Test(t, everyInstanceLateWakeUpIsReported)
}

// everyInstanceLateWakeUpIsReported is TestEveryInstanceLateWakeUpIsReported
// inside its bubble.
func everyInstanceLateWakeUpIsReported(t *testing.T) {
	const period = time.Second
	clock := newStallClock(t)
	var misfires atomic.Int64
	s := newScheduler(t, memory.New(), "a", schedule.WithClock(clock), schedule.WithObserver(schedule.ObserverFunc(func(ev schedule.Event) {
		if ev.Kind == schedule.EventMisfire {
			misfires.Add(1)
		}
	})))
	var log startLog
	err := s.Register(schedule.Job{Name: "local", Schedule: "@every 1s", Mode: schedule.EveryInstance, Misfire: schedule.MisfireRunOnce,
		MisfireGrace: 200 * time.Millisecond,
		Func: func(ctx context.Context, r schedule.Run) error {
			log.add(started{at: r.ScheduledAt, from: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	stalledAt, resumed := stallAcross(clock, period, 2)
	eventually.True(t, 5*time.Second, "EventMisfire for the late wake-up", func() bool { return misfires.Load() > 0 })
	if ran := len(log.dueBetween(stalledAt, resumed)); ran != 0 { // every-instance jobs have no catch-up: late instants are skipped whatever the policy
		t.Errorf("%d of the instants missed by an every-instance job during a %v pause ran", ran, resumed.Sub(stalledAt).Round(time.Millisecond))
	}
}
